"""The ``ollama_stub`` / ``anthropic_stub`` fixtures: the real clients, scripted over loopback,
driven by a simulated-time Runtime (``sim_runtime`` + ``stub_provider``)."""

from __future__ import annotations

import os

from corvid_actors.testing import EventRecorder, sim_runtime, stub_provider


def test_ollama_stub_approval_flow_allow_then_deny(sim_clock, ollama_stub, tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("the secret word is corvid\n")
    ollama_stub.add_tool_calls([("read_file", {"path": "notes.txt"})])
    ollama_stub.add_tool_calls([("write_file", {"path": "out.txt", "content": "x"})])
    ollama_stub.add_reply("The word is corvid; I did not write out.txt.")
    with sim_runtime(sim_clock, stub_provider(ollama_stub), workspace_dir=tmp_path / "ws") as rt:
        recorder = EventRecorder.attach(rt)
        # an agent in the "default" permission mode: every tool call asks for approval
        agent = rt.create_agent("reader", provider="ollama", model="llama3.1:8b", permission_mode="default")
        s = rt.create_session(agent_id=agent.id, source="web")
        rt.start_process(s.id, "what is the secret word?")
        rt.settle()
        [ask] = rt.list_approvals(s.id)
        assert ask["tool_name"] == "read_file"
        rt.resolve_approval(ask["id"], "allow")
        rt.settle()
        [ask] = rt.list_approvals(s.id)
        assert ask["tool_name"] == "write_file"
        rt.resolve_approval(ask["id"], "deny")
        rt.settle()
        assert [e.event.behavior for e in recorder.of(s.id, "approval_resolved")] == ["allow", "deny"]
        tool_results = [m["content"] for m in ollama_stub.chat_requests[-1].json["messages"] if m["role"] == "tool"]
        assert "corvid" in tool_results[0] and "Permission denied" in tool_results[1]
        assert not (tmp_path / "ws" / "out.txt").exists()
        assert recorder.last("assistant", s.id).content.startswith("The word is corvid")


def test_ollama_stub_fixture_scrubs_the_provider_environment(ollama_stub):
    assert "OLLAMA_HOST" not in os.environ and "ANTHROPIC_API_KEY" not in os.environ
    assert ollama_stub.url.startswith("http://127.0.0.1:")


def test_anthropic_stub_serves_a_scripted_turn_through_the_real_sdk(sim_clock, anthropic_stub, tmp_path):
    anthropic_stub.add_reply("Hello from the stub")
    with sim_runtime(sim_clock, stub_provider(anthropic_stub), workspace_dir=tmp_path / "ws") as rt:
        recorder = EventRecorder.attach(rt)
        s = rt.create_session(source="web")
        rt.start_process(s.id, "hi")
        rt.settle()
        assert recorder.last("assistant", s.id).content == "Hello from the stub"
        assert recorder.last("result", s.id).subtype == "success"
        [request] = anthropic_stub.message_requests
        assert request.json["messages"] == [{"role": "user", "content": "hi"}] or \
            request.json["messages"][-1]["content"][0]["text"] == "hi"
