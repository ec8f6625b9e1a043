"""Command approval policy (OpenAgent seed): allowlist, dangerous flags, session signatures."""

from __future__ import annotations

import pytest

from corvid_actors.core.vocabulary import (
    COMMAND_APPROVAL,
    TOOL_APPROVAL,
    PassThroughPolicy,
    Permission,
    PermissionDecision,
)
from corvid_actors.tools.command_policy import (
    CommandApprovalPolicy,
    CommandPolicySettings,
    auto_approval_refusal,
    command_signature,
    is_auto_approvable,
)

S = CommandPolicySettings()
ASK = PermissionDecision(Permission.ASK, description="Run command: x")
ALLOW = PermissionDecision(Permission.ALLOW)
DENY = PermissionDecision(Permission.DENY, message="Cannot modify protected file: .env")


@pytest.mark.parametrize("command", [
    "ls", "ls -la src", "pwd", "cat README.md", "head -n 20 src/app.py", "tail -n 50 build.log",
    "wc -l src/app.py", "grep -n TODO src/app.py", "grep -in 'two words' notes.txt",
    "find . -name test_x.py", "tree -L 2", "git status", "git log --oneline -5", "git diff HEAD~1",
    "git show HEAD:src/app.py", "echo hello", "diff a.txt b.txt", "du -sh src",
])
def test_simple_allowlisted_commands_are_auto_approvable(command):
    assert auto_approval_refusal(command, S) is None


@pytest.mark.parametrize(("command", "why"), [
    ("", "empty"),
    ("rm -rf build", "not on the allowlist"),
    ("python -m pytest", "not on the allowlist"),
    ("git push origin main", "not on the allowlist"),
    ("git commit -m x", "not on the allowlist"),
    ("gitx status", "not on the allowlist"),
    ("ls; rm -rf x", "metacharacters"),
    ("cat a.txt | sh", "metacharacters"),
    ("echo hi > out.txt", "metacharacters"),
    ("cat $(which x)", "metacharacters"),
    ("cat `id`", "metacharacters"),
    ("ls && touch x", "metacharacters"),
    ("cat *.py", "metacharacters"),
    ("cat ~/.ssh/id_rsa", "metacharacters"),
    ("ls\nrm x", "metacharacters"),
    ("cat 'unclosed", "does not parse"),
    ("find . -name x -exec rm {} +", "metacharacters"),
    ("find . -delete", "dangerous flag -delete"),
    ("find . -fprint out", "dangerous flag -fprint"),
    ("grep -r password .", "dangerous flag -r"),
    ("grep -rn password .", "dangerous flag -r"),
    ("grep --recursive=x a", "dangerous flag --recursive"),
    ("diff -r a b", "dangerous flag -r"),
    ("tail -f app.log", "dangerous flag -f"),
    ("tree -o out.txt", "dangerous flag -o"),
    ("git diff --output=patch.txt", "dangerous flag --output"),
    ("git diff --ext-diff", "dangerous flag --ext-diff"),
    ("cat /etc/passwd", "outside the project"),
    ("cat ../other/secret.txt", "outside the project"),
    ("head --file=/etc/shadow", "outside the project"),
])
def test_refused_commands_say_why(command, why):
    refusal = auto_approval_refusal(command, S)
    assert refusal is not None and why in refusal
    assert not is_auto_approvable(command, S)


def test_allowlist_patterns_are_configurable_and_multi_word():
    settings = CommandPolicySettings(allowlist=("npm test", "make check"))
    assert is_auto_approvable("npm test -- --watch=false", settings)
    assert not is_auto_approvable("npm install", settings)
    assert not is_auto_approvable("ls", settings)


@pytest.mark.parametrize(("a", "b", "same"), [
    ("git  log   -5", "git log -5", True),
    ("grep 'a b' f", 'grep "a b" f', True),
    ("grep 'a b' f", "grep a b f", False),
    ("rm x", "rm y", False),
])
def test_command_signature(a, b, same):
    assert (command_signature(a) == command_signature(b)) is same


def policy(mode: str = "auto-edit", *, sandboxed: bool = True, **settings) -> CommandApprovalPolicy:
    return CommandApprovalPolicy(CommandPolicySettings(**settings), mode=mode, sandboxed=sandboxed)


def test_without_the_os_sandbox_nothing_is_auto_approved():
    review = policy("auto-edit", sandboxed=False).review("run_command", {"command": "ls -la"}, ASK)
    assert (review.decision.permission, review.kind) == (Permission.ASK, COMMAND_APPROVAL)


@pytest.mark.parametrize(("mode", "tool", "command", "decision", "permission", "kind"), [
    # allowlisted, in an auto-approve mode: runs without a human
    ("auto-edit", "run_command", "ls -la", ASK, Permission.ALLOW, TOOL_APPROVAL),
    # not allowlisted: a human decides, as a command approval
    ("auto-edit", "run_command", "make build", ASK, Permission.ASK, COMMAND_APPROVAL),
    # default mode asks for everything, allowlisted or not
    ("default", "run_command", "ls -la", ASK, Permission.ASK, COMMAND_APPROVAL),
    # a DENY is never upgraded, an ALLOW stays
    ("auto-edit", "run_command", "cat .env", DENY, Permission.DENY, COMMAND_APPROVAL),
    ("full-auto", "run_command", "make build", ALLOW, Permission.ALLOW, COMMAND_APPROVAL),
    # other tools are none of the policy's business
    ("auto-edit", "write_file", "ls", ASK, Permission.ASK, TOOL_APPROVAL),
])
def test_review_table(mode, tool, command, decision, permission, kind):
    review = policy(mode).review(tool, {"command": command}, decision)
    assert (review.decision.permission, review.kind) == (permission, kind)


def test_session_approvals_are_remembered_by_signature():
    p = policy("default")
    p.remember("run_command", {"command": "make  build"})
    assert p.approved_signatures == {"make build"}
    assert p.review("run_command", {"command": "make build"}, ASK).decision.permission is Permission.ALLOW
    assert p.review("run_command", {"command": "make clean"}, ASK).decision.permission is Permission.ASK
    # a remembered command is still denied when the permission check denies it
    assert p.review("run_command", {"command": "make build"}, DENY).decision.permission is Permission.DENY


def test_disabled_policy_changes_nothing():
    p = policy(enabled=False)
    p.remember("run_command", {"command": "ls"})
    assert p.review("run_command", {"command": "ls"}, ASK) == PassThroughPolicy().review("x", {}, ASK)
