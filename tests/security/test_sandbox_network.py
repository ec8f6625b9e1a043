"""Issue 33, the network item: what an approved command can reach is a ``[tools.sandbox]
network`` choice per permission mode (``none`` / ``host``), and the approval prompt says
which. The loopback listener stands for a trust-auth PostgreSQL on the host."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from corvid_actors.config import Config, load_config
from corvid_actors.errors import ConfigError
from corvid_actors.providers.anthropic import AnthropicProvider
from corvid_actors.testing.anthropic_stub import AnthropicStubServer

MODEL = "claude-sonnet-4-6"


@pytest.fixture
def stub():
    with AnthropicStubServer(api_key="test-key") as server:
        yield server


@pytest.fixture
def loopback_port() -> Iterator[int]:
    """A TCP listener on the host's loopback (a local database trusting local clients)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def probe(port: int) -> str:
    return (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2); "
            "print('CONNECTED')\"")


def results_text(stub) -> str:
    body = stub.message_requests[-1].json
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return str([b.get("content") for b in blocks if b.get("type") == "tool_result"])


@pytest.mark.parametrize("choice", ["none", "host"])
def test_an_approved_command_gets_the_network_of_its_mode(make_e2e, stub, loopback_port, choice):
    stub.add_tool_use([("run_command", {"command": probe(loopback_port)})])
    stub.add_reply("ok")
    config = Config().replace(tools={"sandbox": {"network": {"default": choice}}})
    e2e = make_e2e({"anthropic": AnthropicProvider("test-key", base_url=stub.url)}, config)
    s = e2e.session(provider="anthropic", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    [ask] = e2e.events(s.id, "approval_request")
    assert ask.description.endswith(f"[network: {choice}]"), ask.description
    e2e.runtime.resolve_approval(ask.id, "allow")
    e2e.runtime.settle()
    assert ("CONNECTED" in results_text(stub)) is (choice == "host")


def test_by_default_only_the_approved_default_mode_reaches_the_host(make_e2e, stub, loopback_port):
    stub.add_tool_use([("run_command", {"command": probe(loopback_port)})])
    stub.add_reply("ok")
    e2e = make_e2e({"anthropic": AnthropicProvider("test-key", base_url=stub.url)})
    s = e2e.session(provider="anthropic", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    assert e2e.events(s.id, "approval_request") == []
    assert "CONNECTED" not in results_text(stub)
    sandbox = e2e.runtime.internals.builder.sandbox
    assert [sandbox.network_choice(m) for m in ("default", "plan", "auto-edit", "full-auto")] == \
        ["host", "none", "none", "none"]


@pytest.mark.parametrize("network", [False, True])
def test_a_loopback_service_is_reachable_only_with_the_host_network(daemon_factory, loopback_port,
                                                                     network):
    daemon = daemon_factory(network=network)
    result = daemon.run(probe(loopback_port))
    assert ("CONNECTED" in result.output) is network, result.output


def test_earlier_network_modes_still_load_as_the_network_table(tmp_path: Path):
    old = tmp_path / "old.toml"
    old.write_text('[tools.sandbox]\nnetwork_modes = ["default", "auto-edit"]\n')
    assert load_config(old, environ={}).tools.sandbox.network == {
        "default": "host", "plan": "none", "auto-edit": "host", "full-auto": "none"}
    both = tmp_path / "both.toml"
    both.write_text('[tools.sandbox]\nnetwork_modes = ["default"]\nnetwork = { default = "none" }\n')
    with pytest.raises(ConfigError, match="keep network only"):
        load_config(both, environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text('[tools.sandbox]\nnetwork = { full-auto = "internet" }\n')
    with pytest.raises(ConfigError, match="must be 'none' or 'host'"):
        load_config(bad, environ={})
