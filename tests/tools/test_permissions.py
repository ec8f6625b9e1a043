"""Permission modes: protected paths first in every mode, then the mode table."""

from __future__ import annotations

import pytest

from corvid_actors.core.vocabulary import Permission, ToolKind, ToolResult, ToolSpec
from corvid_actors.tools.base import Tool
from corvid_actors.tools.coding import coding_tools
from corvid_actors.tools.permissions import (
    MODE_TABLE,
    PLAN_MODE_DENIAL,
    PermissionMode,
    make_permission_check,
)

A, Q, D = Permission.ALLOW, Permission.ASK, Permission.DENY
MODES = list(PermissionMode)


def _tool(name: str, kind: ToolKind) -> Tool:
    return Tool(ToolSpec(name, name), kind, lambda args, ctx: ToolResult("ok"))


@pytest.fixture
def project(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    (tmp_path / ".env").write_text("SECRET=1\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    return tmp_path


@pytest.fixture
def tools():
    registry = {tool.name: tool for tool in coding_tools()}
    registry["plan_update"] = _tool("plan_update", ToolKind.OTHER)
    registry["fs_write"] = _tool("fs_write", ToolKind.OTHER)  # e.g. an MCP file tool
    return registry


# --- parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mode"),
    [("default", PermissionMode.DEFAULT), ("plan", PermissionMode.PLAN),
     ("auto-edit", PermissionMode.AUTO_EDIT), ("full-auto", PermissionMode.FULL_AUTO),
     ("AUTO_EDIT", PermissionMode.AUTO_EDIT), (" Full-Auto ", PermissionMode.FULL_AUTO),
     (None, PermissionMode.DEFAULT), ("", PermissionMode.DEFAULT),
     (PermissionMode.PLAN, PermissionMode.PLAN)],
)
def test_parse(text, mode):
    assert PermissionMode.parse(text) is mode


@pytest.mark.parametrize("text", ["bypassPermissions", "yolo", "auto"])
def test_parse_rejects_unknown_modes_naming_the_valid_ones(text):
    with pytest.raises(ValueError, match="default, plan, auto-edit, full-auto"):
        PermissionMode.parse(text)


def test_make_permission_check_rejects_an_unknown_mode(tools, project):
    with pytest.raises(ValueError, match="Unknown permission mode"):
        make_permission_check("sometimes", tools, project)


# --- the mode table --------------------------------------------------------------------

EXPECTED = {
    #                          READ EDIT COMMAND OTHER
    PermissionMode.DEFAULT:   (Q,   Q,   Q,      Q),
    PermissionMode.PLAN:      (Q,   D,   D,      Q),
    PermissionMode.AUTO_EDIT: (A,   A,   Q,      Q),
    PermissionMode.FULL_AUTO: (A,   A,   A,      A),
}
KINDS = (ToolKind.READ, ToolKind.EDIT, ToolKind.COMMAND, ToolKind.OTHER)
#: one harmless call per kind
CALLS = {
    ToolKind.READ: ("read_file", {"path": "src/a.py"}),
    ToolKind.EDIT: ("write_file", {"path": "src/b.py", "content": "y = 2\n"}),
    ToolKind.COMMAND: ("run_command", {"command": "ls -la src"}),
    ToolKind.OTHER: ("plan_update", {"steps": ["a"]}),
}


def test_the_table_is_complete_and_as_specified():
    assert set(MODE_TABLE) == {(mode, kind) for mode in MODES for kind in KINDS}
    for mode, verdicts in EXPECTED.items():
        assert tuple(MODE_TABLE[(mode, kind)] for kind in KINDS) == verdicts


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_mode_and_kind(tools, project, mode, kind):
    check = make_permission_check(mode, tools, project)
    name, args = CALLS[kind]
    decision = check(name, args)
    expected = EXPECTED[mode][KINDS.index(kind)]
    assert decision.permission is expected
    if expected is Permission.ASK:
        assert decision.description  # what the approval request shows
    if expected is Permission.DENY:
        assert decision.message == PLAN_MODE_DENIAL


def test_ask_carries_the_tool_description(tools, project):
    check = make_permission_check("default", tools, project)
    assert check("run_command", {"command": "ls -la"}).description == "Run command: ls -la"
    assert check("edit_file", {"path": "src/a.py"}).description == "Edit file: src/a.py"
    assert check("plan_update", {}).description == "Use tool: plan_update"


@pytest.mark.parametrize("network", ["none", "host", "host (no sandbox)"])
def test_a_command_approval_says_which_network_it_gets(tools, project, network):
    check = make_permission_check("default", tools, project, command_network=network)
    assert check("run_command", {"command": "pip install x"}).description == \
        f"Run command: pip install x [network: {network}]"
    assert check("edit_file", {"path": "src/a.py"}).description == "Edit file: src/a.py"


@pytest.mark.parametrize("mode", MODES)
def test_unknown_tool_is_denied(tools, project, mode):
    decision = make_permission_check(mode, tools, project)("rm_everything", {})
    assert decision.permission is D and decision.message == "Unknown tool: rm_everything"


# --- protected paths first, in every mode ----------------------------------------------

PROTECTED_CALLS = [
    ("write_file", {"path": ".env", "content": "x"}, "Cannot modify protected file: .env"),
    ("write_file", {"path": "sub/.env.local", "content": "x"}, "Cannot modify protected file"),
    ("edit_file", {"path": ".git/config", "old_string": "a", "new_string": "b"},
     "Cannot modify protected file: .git/config"),
    ("write_file", {"path": "app.db", "content": "x"}, "Cannot modify protected file: app.db"),
    ("fs_write", {"file_path": ".env"}, "Cannot modify protected file: .env"),
    ("fs_write", {"files": [{"file_path": "src/ok.py"}, {"file_path": ".env"}]},
     "Cannot modify protected file: .env"),
    ("run_command", {"command": "echo x > .env"}, "Cannot modify protected file: .env"),
    ("run_command", {"command": "sed -i s/a/b/ .git/config"}, "Cannot modify protected file"),
    ("run_command", {"command": "bash -c 'rm -rf .'"}, "Cannot modify protected file"),
    ("run_command", {"command": "cat .env"}, "Cannot modify protected file: .env"),
    ("run_command", {"command": "sudo ls"}, "Blocked dangerous command"),
    ("read_file", {"path": ".env"}, "Cannot read protected file: .env"),
    ("search_files", {"pattern": "x", "path": ".git"}, "Cannot read protected file: .git"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("name", "args", "message"), PROTECTED_CALLS)
def test_protected_paths_are_denied_in_every_mode(tools, project, mode, name, args, message):
    decision = make_permission_check(mode, tools, project)(name, args)
    assert decision.permission is D
    assert decision.message.startswith(message)


def test_full_auto_still_allows_ordinary_writes(tools, project):
    check = make_permission_check("full-auto", tools, project)
    assert check("write_file", {"path": "src/b.py", "content": "x"}).permission is A
    assert check("run_command", {"command": "echo hi > out.txt"}).permission is A


def test_custom_patterns_and_empty_patterns(tools, project):
    custom = make_permission_check("full-auto", tools, project, ("CLAUDE.md",))
    assert custom("write_file", {"path": "CLAUDE.md", "content": "x"}).message == (
        "Cannot modify protected file: CLAUDE.md"
    )
    assert custom("write_file", {"path": ".env", "content": "x"}).permission is A
    # an empty configuration means the defaults, never "nothing is protected"
    empty = make_permission_check("full-auto", tools, project, ())
    assert empty("write_file", {"path": ".env", "content": "x"}).permission is D
