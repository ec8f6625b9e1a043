"""External MCP servers: a real server (tests/fixtures/mcp_echo_server.py, written with the
``mcp`` package) over stdio, and the pure rules around it (names, config layers, results)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import mcp_types
import pytest

from corvid_actors.config import Config
from corvid_actors.core.vocabulary import CancelToken
from corvid_actors.db.store import Store
from corvid_actors.errors import ConfigError
from corvid_actors.schema.tool_sections import McpConfig
from corvid_actors.tools.base import ToolContext
from corvid_actors.tools.env import safe_env
from corvid_actors.tools.mcp_client import (
    MAX_TOOL_NAME_CHARS,
    McpToolSource,
    add_mcp_server,
    connection_tools,
    may_use_server,
    namespaced_tool_name,
    render_result,
    resolve_servers,
    servers_for_agent,
)
from corvid_actors.tools.mcp_connection import McpConnection, McpLimits, McpServerSpec
from tests.fixtures.mcp_servers import live_processes, new_tag, server_command

SECRET = "WALLET_ENCRYPTION_KEY"
#: real seconds: the slow tool's sleep, the pause before cancelling it, and the bound on how
#: long the cancelled call may still take to return
SLOW_CALL_S = 2.0
IN_FLIGHT_S = 0.2
CANCEL_RETURNS_WITHIN_S = 1.0


def connect(mode: str, tag: str, *, env: dict[str, str] | None = None, **limits: float) -> McpConnection:
    command, args = server_command(mode, tag)
    spec = McpServerSpec("echo", command, tuple(args), env=env or {})
    conn = McpConnection(spec, env=safe_env(spec.env), cwd=None, limits=McpLimits(**limits))
    conn.start()
    return conn


@pytest.fixture(scope="module")
def echo():
    """One real echo server for the module (a Python MCP server takes a second to start)."""
    tag = new_tag()
    os.environ[SECRET] = "super-secret"  # the daemon's secret: the server must not see it
    try:
        conn = connect("echo", tag, env={"ECHO_GREETING": "configured"}, connect_timeout_s=20)
        assert conn.wait_ready(), conn.error
    finally:
        del os.environ[SECRET]
    yield conn
    conn.close()
    assert live_processes(tag) == []


# --- a real server -------------------------------------------------------------------------------


def test_lists_the_servers_tools_with_their_json_schemas(echo):
    by_name = {t.name: t for t in echo.tools}
    assert {"echo", "env", "slow", "spawn_child", "crash"} <= set(by_name)
    schema = by_name["echo"].input_schema
    assert schema["required"] == ["text"]
    assert schema["properties"]["times"]["type"] == "integer"
    assert by_name["echo"].description == "Echo the text back, repeated."


def test_tools_become_namespaced_tools_of_kind_other_that_call_the_server(echo):
    tools = {t.name: t for t in connection_tools(echo, set())}
    tool = tools["mcp__echo__echo"]
    assert tool.kind.value == "other"
    assert tool.spec.parameters["properties"]["text"]["type"] == "string"
    result = tool.handler({"text": "hi", "times": 3}, ToolContext(project_dir=Path.cwd()))
    assert (result.output, result.is_error) == ("hi hi hi", False)


def test_invalid_arguments_are_an_error_result_not_an_exception(echo):
    result = echo.call("echo", {"times": 2})
    assert result.is_error and "text" in result.output


def test_server_sees_the_allowlist_plus_its_own_variables_and_no_secret(echo):
    assert echo.call("env", {"name": "ECHO_GREETING"}).output == "configured"
    assert echo.call("env", {"name": "PATH"}).output == os.environ["PATH"]
    assert echo.call("env", {"name": SECRET}).output == "<unset>"


def test_a_call_that_outlives_its_timeout_is_an_error_and_the_server_stays_usable(echo):
    result = echo.call("slow", {"seconds": 0.6}, timeout_s=0.3)
    assert result.is_error and "did not answer within 0.3s" in result.output
    assert echo.call("echo", {"text": "still here"}).output == "still here"


def test_cancelling_a_call_returns_at_once(echo):
    cancel = CancelToken()
    result: list = []
    worker = threading.Thread(target=lambda: result.append(echo.call("slow", {"seconds": SLOW_CALL_S}, cancel)))
    worker.start()
    time.sleep(IN_FLIGHT_S)  # one bounded pause: the call is on its way (the server sleeps SLOW_CALL_S)
    cancelled_at = time.monotonic()
    cancel.cancel()
    worker.join(timeout=SLOW_CALL_S + 5.0)
    returned_after = time.monotonic() - cancelled_at
    assert not worker.is_alive()
    assert result[0].is_error and "cancelled" in result[0].output
    # "at once": far sooner than the server would have answered (real time, generous bound)
    assert returned_after < CANCEL_RETURNS_WITHIN_S, f"returned {returned_after:.2f}s after the cancel"


# --- servers that fail ---------------------------------------------------------------------------


def test_a_bad_command_fails_at_once_with_a_clear_error():
    spec = McpServerSpec("broken", "/nonexistent/mcp-server")
    conn = McpConnection(spec, env=safe_env({}), cwd=None)
    conn.start()
    assert conn.wait_ready() is False
    assert "MCP server 'broken' could not start" in conn.error and "FileNotFoundError" in conn.error
    assert conn.call("anything", {}).is_error
    conn.close()


def test_a_server_that_never_answers_initialize_times_out_and_is_killed():
    tag = new_tag()
    conn = connect("silent", tag, connect_timeout_s=0.3)
    assert conn.wait_ready() is False
    assert "did not answer initialize/tools/list within 0.3s" in conn.error
    conn.close()
    assert live_processes(tag) == []


# --- the session hook ----------------------------------------------------------------------------


@pytest.fixture
def store():
    s = Store("sqlite:///:memory:")
    yield s
    s.close()


def test_a_server_none_of_whose_tools_the_agent_may_use_is_not_started(store):
    command, args = server_command("echo", new_tag())
    add_mcp_server(store, "echo", command, args=args)
    agent = store.create_agent("narrow", tool_permissions=["read_file"])
    session = store.create_session(agent_id=agent.id)
    tools = McpToolSource(McpConfig(), store)(store.session_context(session.id))
    assert (len(tools), tools.closers, tools.notices) == (0, [], [])


def test_a_failed_server_is_a_notice_and_the_others_still_serve(store):
    add_mcp_server(store, "broken", "/nonexistent/mcp-server")
    session = store.create_session()
    tools = McpToolSource(McpConfig(), store)(store.session_context(session.id))
    assert len(tools) == 0 and len(tools.closers) == 1
    [notice] = tools.notices
    assert notice.subtype == "mcp_server_failed" and "'broken' could not start" in notice.message
    assert "continues without its tools" in notice.message
    for close in tools.closers:
        close()


# --- pure rules ------------------------------------------------------------------------------------


def test_tool_names_are_namespaced_safe_short_and_unique():
    taken: set[str] = set()
    assert namespaced_tool_name("git hub", "create.issue", taken) == "mcp__git_hub__create_issue"
    assert namespaced_tool_name("git.hub", "create issue", taken) == "mcp__git_hub__create_issue_2"
    long = namespaced_tool_name("s" * 40, "t" * 40, taken)
    other = namespaced_tool_name("s" * 40, "t" * 39 + "u", taken)
    assert len(long) == len(other) == MAX_TOOL_NAME_CHARS and long != other
    assert all(c.isalnum() or c in "_-" for c in long)


def test_later_layers_win_and_a_disabled_entry_removes_the_server():
    g = McpServerSpec("git", "git-global")
    a = McpServerSpec("git", "git-agent")
    off = McpServerSpec("web", "web", enabled=False)
    assert resolve_servers([[g, McpServerSpec("web", "web")], [a, off]]) == [a]


def test_servers_for_agent_merge_config_and_store_by_scope(store):
    me = store.create_agent("Alice")
    other = store.create_agent("Bob")
    config = McpConfig(servers={
        "fs": {"command": "fs-config"},
        "mine": {"command": "mine-config", "agents": ["alice"]},
        "theirs": {"command": "theirs", "agents": [other.id]},
    })
    add_mcp_server(store, "fs", "fs-store-global", args=["--root", "/srv"], env={"A": "1"})
    add_mcp_server(store, "mine", "mine-disabled-for-me", agent_id=me.id, enabled=False)
    add_mcp_server(store, "extra", "extra-for-me", agent_id=me.id, cwd="~/work")
    got = {s.name: s for s in servers_for_agent(config, store, me)}
    assert set(got) == {"fs", "extra"}
    assert (got["fs"].command, got["fs"].args, got["fs"].env) == ("fs-store-global", ("--root", "/srv"), {"A": "1"})
    assert got["extra"].cwd == "~/work"
    assert {s.name for s in servers_for_agent(config, store, other)} == {"fs", "theirs"}
    assert {s.name for s in servers_for_agent(config, None, None)} == {"fs"}
    no_agent = {s.name: s for s in servers_for_agent(config, store, None)}  # the global rows only
    assert set(no_agent) == {"fs"} and no_agent["fs"].command == "fs-store-global"


def test_an_explicit_tool_list_must_name_a_servers_tool_for_it_to_start():
    assert may_use_server(None, "echo")
    assert may_use_server(["read_file", "mcp__echo__echo"], "echo")
    assert not may_use_server(["read_file", "mcp__echoes__x"], "echo")


def test_results_render_every_content_kind_and_are_cut_in_the_middle():
    result = mcp_types.CallToolResult(content=[
        mcp_types.TextContent(type="text", text="line"),
        mcp_types.ImageContent(type="image", data="QUJD", mime_type="image/png"),
        mcp_types.EmbeddedResource(type="resource", resource=mcp_types.TextResourceContents(
            uri="file:///a.txt", text="inside")),
    ], is_error=True)
    rendered = render_result(result, 1000)
    assert rendered.output == "line\n[image content: image/png, 4 base64 chars]\ninside" and rendered.is_error
    structured = mcp_types.CallToolResult(content=[], structured_content={"n": 1})
    assert render_result(structured, 1000).output == '{"n": 1}'
    big = render_result(mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="x" * 500)]), 100)
    assert len(big.output) < 200 and "characters truncated" in big.output and big.full_output == "x" * 500


@pytest.mark.parametrize(("row", "why"), [
    ({"args": ["x"]}, "command"),
    ({"command": "x", "bogus": 1}, "unknown config key mcp.servers.s.bogus"),
    ({"command": "x", "args": "not-a-list"}, "mcp.servers.s.args"),
    ({"command": "x", "env": {"A": 1}}, "mcp.servers.s.env"),
    ({"command": "x", "enabled": "yes"}, "mcp.servers.s.enabled"),
])
def test_bad_server_config_names_the_key(row, why):
    with pytest.raises(ConfigError, match=why.replace(".", r"\.")):
        Config().replace(mcp={"servers": {"s": row}})

