"""Auto-approval bypasses of issue 13 (and the guard's parameter-expansion gap, issue 12
item 20): each must be asked, or denied, never auto-approved."""

from __future__ import annotations

import os

import pytest

from corvid_actors.core.vocabulary import COMMAND_APPROVAL, Permission, PermissionDecision
from corvid_actors.tools.coding import coding_tools
from corvid_actors.tools.command_policy import (
    CommandApprovalPolicy,
    CommandPolicySettings,
    auto_approval_refusal,
)
from corvid_actors.tools.permissions import PermissionMode, make_permission_check
from corvid_actors.tools.shell_guard import protected_write_target

ASK = PermissionDecision(Permission.ASK, description="Run command")


@pytest.mark.parametrize("command", [
    "grep --recurs SECRET .",
    "grep --recursive SECRET .",
    "grep --direc=recurse SECRET .",
    "grep --directories=recurse SECRET .",
    "grep -rA1 SECRET .",
    "grep -iRn SECRET .",
    "grep -A1r SECRET .",
    "diff -N --recurs empty .",
    "diff -Nr empty .",
    "tail -fn5 log.txt",
    "tail --foll log.txt",
    "git diff --out=x",
    "git log --ext-d",
    "grep -f/etc/shadow x",
    "grep --file=/etc/shadow x",
    "cat -- ../../etc/passwd",
])
def test_bypasses_are_asked_not_auto_approved(command, tmp_path):
    assert auto_approval_refusal(command, CommandPolicySettings(), tmp_path) is not None
    policy = CommandApprovalPolicy(mode="auto-edit", sandboxed=True, project_dir=tmp_path)
    review = policy.review("run_command", {"command": command}, ASK)
    assert (review.decision.permission, review.kind) == (Permission.ASK, COMMAND_APPROVAL)


def test_a_symlink_leading_out_of_the_project_is_asked(tmp_path):
    os.symlink("/etc/shadow", tmp_path / "link")
    os.symlink("/etc", tmp_path / "etcdir")
    (tmp_path / "inside.txt").write_text("ok")
    os.symlink("inside.txt", tmp_path / "good")
    settings = CommandPolicySettings()
    assert "outside" in auto_approval_refusal("cat link", settings, tmp_path)
    assert "outside" in auto_approval_refusal("cat etcdir/passwd", settings, tmp_path)
    assert "outside" in auto_approval_refusal("head -n1 link", settings, tmp_path)
    # links that stay inside, and plain commands, are still auto-approved
    assert auto_approval_refusal("cat good", settings, tmp_path) is None
    assert auto_approval_refusal("grep -n hello inside.txt", settings, tmp_path) is None
    assert auto_approval_refusal("ls -la", settings, tmp_path) is None


def test_unparseable_commands_are_asked(tmp_path):
    assert auto_approval_refusal("cat 'unterminated", CommandPolicySettings(), tmp_path) is not None


def test_nothing_is_auto_approved_without_the_sandbox(tmp_path):
    policy = CommandApprovalPolicy(mode="auto-edit", sandboxed=False, project_dir=tmp_path)
    review = policy.review("run_command", {"command": "ls"}, ASK)
    assert review.decision.permission is Permission.ASK


@pytest.mark.parametrize("command", [
    "rm ${TARGET:-.env}", "cat ${X:=.env}", "cat ${X:+.env}", "cat ${X-.env}",
    "rm -f \"${T:-.env}\"", "cat ${X:-.e}nv", "cat .e${UNSET}nv",
])
def test_parameter_expansion_naming_a_protected_path_is_seen(command, tmp_path):
    (tmp_path / ".env").write_text("SECRET=1\n")
    assert protected_write_target(command, tmp_path) is not None


@pytest.mark.parametrize("mode", list(PermissionMode))
def test_parameter_expansion_is_denied_in_every_mode(mode, tmp_path):
    (tmp_path / ".env").write_text("SECRET=1\n")
    tools = {t.name: t for t in coding_tools()}
    check = make_permission_check(mode, tools, tmp_path)
    decision = check("run_command", {"command": "rm ${TARGET:-.env}"})
    assert decision.permission is Permission.DENY
    assert (tmp_path / ".env").read_text() == "SECRET=1\n"
