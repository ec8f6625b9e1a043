"""External MCP servers through the runtime: a real MCP server (tests/fixtures/mcp_echo_server.py)
over stdio, called by sessions over the Ollama stub and the Anthropic stub; and servers that
fail — a bad command, one that hangs on initialize, one that dies mid-call — each leaving the
session running with a clear event and no process behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from corvid_actors.config import Config
from corvid_actors.providers.anthropic import AnthropicProvider
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing.anthropic_stub import AnthropicStubServer
from corvid_actors.testing.ollama_stub import OllamaStubServer
from corvid_actors.tools.mcp_client import add_mcp_server
from tests.fixtures.mcp_servers import live_processes, new_tag, server_command

OLLAMA_MODEL = "llama3.1:8b"
CLAUDE = "claude-sonnet-4-6"
#: a Python MCP server takes one to two seconds to start on a loaded 2-core machine
CONNECT_S = 20.0


@pytest.fixture
def ollama():
    with OllamaStubServer() as server:
        yield server


@pytest.fixture
def anthropic():
    with AnthropicStubServer(api_key="test-key") as server:
        yield server


def config(**mcp) -> Config:
    return Config().replace(slots={"max_parallel": 4}, mcp={"connect_timeout_s": CONNECT_S, **mcp})


def ollama_e2e(make_e2e, stub, cfg=None):
    return make_e2e({"ollama": OllamaProvider(stub.url)}, cfg or config())


def tool_messages(stub):
    return [m["content"] for m in stub.chat_requests[-1].json["messages"] if m["role"] == "tool"]


def system_events(e2e, sid, subtype):
    return [e for e in e2e.events(sid, "system") if e.subtype == subtype]


def stop_and_settle(e2e, sid):
    e2e.runtime.stop_process(sid)
    e2e.runtime.settle()  # the closers run on tracked workers: settled = servers gone


def test_ollama_session_calls_an_mcp_tool_after_approval(make_e2e, ollama):
    tag = new_tag()
    e2e = ollama_e2e(make_e2e, ollama)
    command, args = server_command("echo", tag)
    add_mcp_server(e2e.runtime.internals.store, "echo", command, args=args)  # global: every agent
    ollama.add_tool_calls([("mcp__echo__echo", {"text": "hi", "times": 2})])
    ollama.add_reply("The server said hi twice.")
    s = e2e.session(provider="ollama", model=OLLAMA_MODEL, mode="default")
    e2e.runtime.start_process(s.id, "echo hi twice")
    e2e.runtime.settle()

    offered = {t["function"]["name"]: t["function"] for t in ollama.chat_requests[0].json["tools"]}
    echo = offered["mcp__echo__echo"]
    assert echo["parameters"]["required"] == ["text"]
    assert set(echo["parameters"]["properties"]) == {"text", "times"}
    assert {"read_file", "corvid_send_message"} <= set(offered)  # one registry for every tool
    [ask] = e2e.events(s.id, "approval_request")  # MCP tools go through approvals like any tool
    assert ask.tool_name == "mcp__echo__echo"
    e2e.runtime.resolve_approval(ask.id, "allow")
    e2e.runtime.settle()

    assert tool_messages(ollama) == ["hi hi"]
    assert e2e.events(s.id, "assistant")[-1].content == "The server said hi twice."
    # one server for this session, still up (the OS sandbox's bwrap launcher and init
    # carry the same command line)
    assert len([p for p in live_processes(tag) if Path(f"/proc/{p}/comm").read_text().strip() != "bwrap"]) == 1
    stop_and_settle(e2e, s.id)
    assert live_processes(tag) == []


def test_anthropic_session_calls_config_servers_with_a_safe_environment(make_e2e, anthropic, monkeypatch):
    monkeypatch.setenv("WALLET_ENCRYPTION_KEY", "super-secret-value")
    tag = new_tag()
    command, args = server_command("echo", tag)
    cfg = config(servers={"echo": {"command": command, "args": args, "env": {"ECHO_GREETING": "configured"}}})
    e2e = make_e2e({"anthropic": AnthropicProvider("test-key", base_url=anthropic.url)}, cfg)
    anthropic.add_tool_use([("mcp__echo__env", {"name": "ECHO_GREETING"}),
                            ("mcp__echo__env", {"name": "WALLET_ENCRYPTION_KEY"})])
    anthropic.add_reply("Checked the environment.")
    s = e2e.session(provider="anthropic", model=CLAUDE, mode="full-auto")
    e2e.runtime.start_process(s.id, "what does the server see?")
    e2e.runtime.settle()

    offered = {t["name"]: t for t in anthropic.message_requests[0].json["tools"]}
    assert offered["mcp__echo__env"]["input_schema"]["required"] == ["name"]
    blocks = [b for m in anthropic.message_requests[-1].json["messages"] if isinstance(m["content"], list)
              for b in m["content"] if b.get("type") == "tool_result"]
    outputs = [str(b["content"]) for b in blocks]
    assert "configured" in outputs[0] and "<unset>" in outputs[1]
    assert not any(b.get("is_error") for b in blocks)
    assert e2e.events(s.id, "assistant")[-1].content == "Checked the environment."
    stop_and_settle(e2e, s.id)
    assert live_processes(tag) == []


def test_a_server_with_a_bad_command_is_reported_and_the_session_goes_on(make_e2e, ollama):
    e2e = ollama_e2e(make_e2e, ollama)
    add_mcp_server(e2e.runtime.internals.store, "broken", "/nonexistent/mcp-server")
    ollama.add_reply("Still here without it.")
    s = e2e.session(provider="ollama", model=OLLAMA_MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()

    [failed] = system_events(e2e, s.id, "mcp_server_failed")
    assert "MCP server 'broken' could not start" in failed.message
    assert "continues without its tools" in failed.message
    assert e2e.events(s.id, "assistant")[-1].content == "Still here without it."
    assert e2e.runtime.is_running(s.id)
    assert not any(t["function"]["name"].startswith("mcp__broken") for t in ollama.chat_requests[0].json["tools"])


def test_a_server_hanging_on_initialize_times_out_and_its_process_tree_is_killed(make_e2e, ollama):
    tag = new_tag()
    # 2 s: time for the server (started in the OS sandbox) to print its stderr under load
    e2e = ollama_e2e(make_e2e, ollama, config(connect_timeout_s=2.0))
    command, args = server_command("hang", tag)  # ignores stdin EOF and has a child of its own
    add_mcp_server(e2e.runtime.internals.store, "stuck", command, args=args)
    ollama.add_reply("Going on without it.")
    s = e2e.session(provider="ollama", model=OLLAMA_MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()

    [failed] = system_events(e2e, s.id, "mcp_server_failed")
    assert "'stuck' did not answer initialize/tools/list within 2s" in failed.message
    assert "hanging before initialize" in failed.message  # the server's stderr is quoted
    assert e2e.events(s.id, "assistant")[-1].content == "Going on without it."
    assert e2e.runtime.is_running(s.id)
    stop_and_settle(e2e, s.id)
    assert live_processes(tag) == []


def test_a_server_that_dies_mid_call_is_reported_and_the_session_goes_on(make_e2e, ollama):
    tag = new_tag()
    e2e = ollama_e2e(make_e2e, ollama)
    command, args = server_command("echo", tag)
    add_mcp_server(e2e.runtime.internals.store, "echo", command, args=args)
    ollama.add_tool_calls([("mcp__echo__spawn_child", {})])
    ollama.add_tool_calls([("mcp__echo__crash", {})])
    ollama.add_reply("The tool server died; carrying on.")
    ollama.add_tool_calls([("mcp__echo__echo", {"text": "anyone?"})])
    ollama.add_reply("It is gone for good.")
    s = e2e.session(provider="ollama", model=OLLAMA_MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "crash the server")
    e2e.runtime.settle()

    spawned, crashed = tool_messages(ollama)
    assert spawned.isdigit()  # a grandchild the server left behind
    assert "MCP server 'echo' exited during a call to crash" in crashed
    [lost] = system_events(e2e, s.id, "mcp_server_lost")
    assert "exited during a call to crash" in lost.message and "crashing on purpose" in lost.message
    assert e2e.events(s.id, "assistant")[-1].content == "The tool server died; carrying on."

    e2e.runtime.send_message(s.id, "try it again")
    e2e.runtime.settle()
    assert "unavailable for the rest of this session" in tool_messages(ollama)[-1]
    assert e2e.events(s.id, "assistant")[-1].content == "It is gone for good."
    assert e2e.runtime.is_running(s.id)
    stop_and_settle(e2e, s.id)
    assert live_processes(tag) == []
