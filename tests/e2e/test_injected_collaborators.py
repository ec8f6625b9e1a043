"""Injectable collaborators (OpenAgent seed's DI hooks): a host replaces the providers, the
tool registry, the approval policy, the history policy, the clock and the store through
Runtime constructor arguments, and each replacement is the one the sessions use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from corvid_actors.config import Config
from corvid_actors.core.vocabulary import (
    Permission,
    PermissionDecision,
    Review,
    ToolKind,
    ToolResult,
    ToolSpec,
)
from corvid_actors.db.store import Store
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing.ollama_stub import OllamaStubServer
from corvid_actors.tools.base import Tool, ToolRegistry
from corvid_actors.tools.coding import coding_tools

MODEL = "llama3.1:8b"


@pytest.fixture
def stub():
    with OllamaStubServer() as server:
        yield server


def cfg(tmp_path) -> Config:
    return Config().replace(store={"data_dir": str(tmp_path / "data")})


def non_system(request) -> list[dict[str, Any]]:
    return [m for m in request.json["messages"] if m["role"] != "system"]


def test_a_provider_factory_receives_the_config(make_e2e, stub, tmp_path):
    seen: list[Config] = []

    def providers(config: Config) -> Mapping[str, OllamaProvider]:
        seen.append(config)
        return {"ollama": OllamaProvider(stub.url)}

    e2e = make_e2e(providers, cfg(tmp_path))
    stub.add_reply("hello from the factory's provider")
    s = e2e.session(provider="ollama", model=MODEL)
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert seen == [e2e.runtime.config]
    assert e2e.events(s.id, "assistant")[0].content == "hello from the factory's provider"


def test_a_tool_registry_factory_replaces_the_tools(make_e2e, stub, tmp_path):
    weather = Tool(ToolSpec("weather", "Today's weather", {"type": "object", "properties": {}}),
                   ToolKind.READ, lambda args, ctx: ToolResult("sunny, 21 C"))
    e2e = make_e2e({"ollama": OllamaProvider(stub.url)}, cfg(tmp_path),
                   tool_registry_factory=lambda: ToolRegistry([weather, *coding_tools()[:1]]))
    stub.add_tool_calls([("weather", {})])
    stub.add_reply("It is sunny.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "weather?")
    e2e.runtime.settle()
    offered = [t["function"]["name"] for t in stub.chat_requests[0].json["tools"]]
    # the registry's tools replace the coding tools (runtime tools and the plan tool join them)
    assert offered[:2] == ["weather", "read_file"] and "update_plan" in offered
    assert not {"write_file", "run_command", "list_files"} & set(offered)
    assert [m["content"] for m in non_system(stub.chat_requests[-1]) if m["role"] == "tool"] == ["sunny, 21 C"]


class AllowReads:
    """A host's approval policy: reads never ask; it remembers what it was shown."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.reviewed: list[str] = []

    def review(self, tool_name: str, arguments: Mapping[str, Any], decision: PermissionDecision) -> Review:
        self.reviewed.append(tool_name)
        if tool_name == "read_file" and decision.permission is Permission.ASK:
            return Review(PermissionDecision(Permission.ALLOW))
        return Review(decision)

    def remember(self, tool_name: str, arguments: Mapping[str, Any]) -> None:
        return None


def test_an_approval_policy_factory_replaces_the_command_policy(make_e2e, stub, tmp_path):
    made: list[AllowReads] = []

    def factory(spec: Any) -> AllowReads:
        made.append(AllowReads(spec))
        return made[-1]

    e2e = make_e2e({"ollama": OllamaProvider(stub.url)}, cfg(tmp_path), approval_policy_factory=factory)
    stub.add_tool_calls([("read_file", {"path": "README.md"})])
    stub.add_tool_calls([("run_command", {"command": "ls"})])
    stub.add_reply("done")
    s = e2e.session(provider="ollama", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "read it")
    e2e.runtime.settle()
    [policy] = made
    assert (policy.spec.permission_mode, policy.spec.agent_name) == ("default", "agent-0")
    assert "run_command" in policy.spec.command_tools
    assert policy.reviewed == ["read_file", "run_command"]
    # reads ran without a human; the command still asks, as an ordinary tool approval
    [ask] = e2e.events(s.id, "approval_request")
    assert (ask.tool_name, ask.kind) == ("run_command", "tool")


def test_a_history_policy_factory_replaces_the_memory_policy(make_e2e, stub, tmp_path):
    specs: list[Any] = []

    def factory(spec: Any):
        specs.append(spec)
        return lambda history: list(history[-1:])  # this host's model sees one message

    e2e = make_e2e({"ollama": OllamaProvider(stub.url)}, cfg(tmp_path), history_policy_factory=factory)
    stub.add_tool_calls([("list_files", {"path": "."})])
    stub.add_reply("done")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "look")
    e2e.runtime.settle()
    assert specs[0].agent_name == "agent-0"
    assert [m["role"] for m in non_system(stub.chat_requests[-1])] == ["tool"]


def test_the_injected_clock_drives_the_runtimes_time(make_e2e, stub, tmp_path):
    e2e = make_e2e({"ollama": OllamaProvider(stub.url)}, cfg(tmp_path))
    e2e.clock.advance(3600)
    stub.add_tool_calls([("read_file", {"path": "README.md"})])
    s = e2e.session(provider="ollama", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "read")
    e2e.runtime.settle()
    [ask] = e2e.events(s.id, "approval_request")
    assert ask.created_at.startswith("2026-01-01T01:00:00")
    e2e.clock.advance(ask.timeout_s)  # the approval times out in simulated time
    e2e.runtime.settle()
    assert e2e.events(s.id, "approval_resolved")[-1].behavior == "deny"


def test_an_injected_store_is_used_and_left_open(make_e2e, stub, tmp_path):
    url = f"sqlite:///{tmp_path / 'host.db'}"
    store = Store(url)
    try:
        e2e = make_e2e({"ollama": OllamaProvider(stub.url)}, cfg(tmp_path), store=store)
        stub.add_tool_calls([("update_plan", {"steps": [{"id": "1", "title": "Plan", "status": "running"}]})])
        stub.add_reply("planned")
        s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
        e2e.runtime.start_process(s.id, "plan")
        e2e.runtime.settle()
        assert e2e.runtime.internals.store is store
        e2e.runtime.shutdown()
        # the host's store is still open, and a second connection sees what the session wrote
        assert store.get_session(s.id).plan
        other = Store(url)
        try:
            assert '"title": "Plan"' in other.get_session(s.id).plan
        finally:
            other.close()
    finally:
        store.close()
