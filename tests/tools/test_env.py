"""Tool subprocesses get the allowlisted environment plus the project's variables, no secrets."""

from __future__ import annotations

import pytest

from corvid_actors.core.vocabulary import Permission
from corvid_actors.tools.base import ToolContext
from corvid_actors.tools.coding import coding_tools
from corvid_actors.tools.env import ENV_ALLOWLIST, looks_secret, safe_env
from corvid_actors.tools.permissions import PermissionMode, make_permission_check

SECRETS = {
    "MY_SECRET_TOKEN": "tok-123456",
    "ANTHROPIC_API_KEY": "sk-ant-abcdef",
    "AWS_SECRET_ACCESS_KEY": "aws-987654",
    "GITHUB_TOKEN": "ghp-555555",
    "ALGOCHAT_MNEMONIC": "word word word",
    "WALLET_ENCRYPTION_KEY": "wallet-777",
}


def test_safe_env_keeps_allowlisted_drops_the_rest_and_adds_project_vars():
    base = {"PATH": "/bin", "HOME": "/home/u", "GIT_AUTHOR_NAME": "me", **SECRETS, "RANDOM": "x"}
    env = safe_env({"PROJECT_VAR": "1", "HOME": "/project-home"}, base)
    assert env == {"PATH": "/bin", "HOME": "/project-home", "GIT_AUTHOR_NAME": "me",
                   "PROJECT_VAR": "1"}


def test_project_variables_are_passed_even_when_secret_looking():
    # the project owner declared them for the project's own commands
    assert safe_env({"DEPLOY_TOKEN": "t"}, {})["DEPLOY_TOKEN"] == "t"


def test_safe_env_defaults_to_the_process_environment(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.setenv("MY_SECRET_TOKEN", "tok")
    env = safe_env(None)
    assert env["PATH"] == "/usr/bin" and "MY_SECRET_TOKEN" not in env


def test_the_allowlist_holds_no_secret_looking_name():
    assert [name for name in ENV_ALLOWLIST if looks_secret(name)] == []
    for name in ("ANTHROPIC_API_KEY", "GH_TOKEN", "GITHUB_TOKEN"):
        assert name not in ENV_ALLOWLIST
    for name in ("PATH", "HOME", "USER", "LANG", "TMPDIR", "GIT_AUTHOR_EMAIL", "SystemRoot"):
        assert name in ENV_ALLOWLIST


@pytest.mark.parametrize("name", sorted(SECRETS) + ["DB_PASSWORD", "API_KEY", "SESSION_AUTH"])
def test_secret_names_are_recognised(name):
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["GIT_AUTHOR_NAME", "PATH", "KEYBOARD_LAYOUT", "MONKEY"])
def test_ordinary_names_are_not_secret(name):
    assert not looks_secret(name)


@pytest.mark.parametrize("mode", list(PermissionMode))
def test_run_command_env_has_no_secrets_in_every_mode(monkeypatch, tmp_path, mode):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    tools = {tool.name: tool for tool in coding_tools()}
    check = make_permission_check(mode, tools, tmp_path)
    args = {"command": "env"}
    decision = check("run_command", args)
    # plan mode runs no commands at all; elsewhere it runs (after approval where asked)
    assert (decision.permission is Permission.DENY) == (mode is PermissionMode.PLAN)
    # the environment does not depend on the mode: the tool builds it from ctx.env only
    ctx = ToolContext(project_dir=tmp_path, env=safe_env({"PROJECT_VAR": "present"}))
    result = tools["run_command"].handler(args, ctx)
    assert not result.is_error
    variables = dict(line.split("=", 1) for line in result.output.splitlines() if "=" in line)
    for name, value in SECRETS.items():
        assert name not in variables
        assert value not in result.output
    assert variables["PATH"] and variables["HOME"] == str(tmp_path)
    assert variables["PROJECT_VAR"] == "present"


def test_safe_env_is_the_allowlisted_names_the_base_has_with_the_project_on_top():
    base = {"PATH": "/bin", "HOME": "/h", "AWS_SECRET_ACCESS_KEY": "x", "LANG": None, "TERM": "xterm"}
    for allowlist in (["PATH", "LANG", "TERM", "NOT_SET"], ("PATH",), frozenset({"HOME", "TERM"}), set()):
        expected = {n: base[n] for n in allowlist if base.get(n) is not None}
        assert safe_env(None, base=base, allowlist=allowlist) == expected
        assert safe_env({"TERM": "dumb", "X": "1"}, base=base, allowlist=allowlist) == {**expected, "TERM": "dumb",
                                                                                        "X": "1"}


def test_safe_env_reads_the_process_environment_as_it_is_now(monkeypatch):
    monkeypatch.setenv("LANG", "C.UTF-8")
    assert safe_env(None)["LANG"] == "C.UTF-8"
    monkeypatch.delenv("LANG")
    assert "LANG" not in safe_env(None)
