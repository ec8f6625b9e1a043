"""SDK-process and stream-processor seeds over the real anthropic SDK and the stub server,
driven through the runtime (supervisor → session actor → SdkLoop → provider → socket)."""

from __future__ import annotations

import pytest

from corvid_actors.config import Config
from corvid_actors.providers.anthropic import AnthropicProvider, ModelPrice
from corvid_actors.testing.anthropic_stub import AnthropicStubServer

MODEL = "claude-sonnet-4-6"


@pytest.fixture
def stub():
    with AnthropicStubServer(api_key="test-key") as server:
        yield server


@pytest.fixture
def e2e(make_e2e, stub):
    provider = AnthropicProvider("test-key", base_url=stub.url,
                                 prices={MODEL: ModelPrice(3.0, 15.0, 0.3, 3.75)})
    cfg = Config().replace(sdk_loop={"retry_max_attempts": 5})
    return make_e2e({"anthropic": provider}, cfg)


def _tool_results(stub):
    """tool_result blocks of the last /v1/messages request."""
    body = stub.message_requests[-1].json
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return [b for b in blocks if b.get("type") == "tool_result"]


def test_streamed_reply_with_usage_and_cost(e2e, stub):
    stub.add_reply("Hello from Claude!", chunks=4, usage={"input_tokens": 1000, "output_tokens": 200})
    s = e2e.session(provider="anthropic", model=MODEL)
    pid = e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert pid == 900000  # SDK pseudo-PIDs count from 900000
    deltas = e2e.events(s.id, "content_block_delta")
    # four streamed chunks; the bus may merge chunks queued behind it (coalesced deltas)
    assert 1 <= len(deltas) <= 4 and "".join(d.text for d in deltas) == "Hello from Claude!"
    [result] = e2e.events(s.id, "result")
    assert result.subtype == "success"
    assert result.total_cost_usd == pytest.approx(1000 * 3.0 / 1e6 + 200 * 15.0 / 1e6)
    assert e2e.runtime.internals.store.get_session(s.id).total_cost_usd == pytest.approx(result.total_cost_usd)
    body = stub.message_requests[-1].json
    assert body["system"].startswith("You are a test agent.")


def test_default_mode_asks_and_an_approved_tool_runs(e2e, stub, project_dir):
    stub.add_tool_use([("read_file", {"path": "README.md"})])
    stub.add_reply("The README says hello.")
    s = e2e.session(provider="anthropic", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "what does the readme say?")
    e2e.runtime.settle()
    [request] = e2e.events(s.id, "approval_request")
    assert request.tool_name == "read_file" and "README.md" in request.description
    assert e2e.runtime.list_approvals()[0]["id"] == request.id
    assert e2e.runtime.resolve_approval(request.id, "allow") is not None
    e2e.runtime.settle()
    [result] = _tool_results(stub)
    assert "hello from the project" in str(result["content"]) and not result.get("is_error")
    states = [t.state for t in e2e.events(s.id, "tool_status")]
    assert states == ["pending", "running", "completed"]
    assert e2e.events(s.id, "assistant")[-1].content == "The README says hello."


def test_human_denial_goes_back_to_the_model(e2e, stub):
    # seed 004: "Permission denied by user" is the tool's result and the model goes on
    stub.add_tool_use([("run_command", {"command": "ls"})])
    stub.add_reply("Understood, I will not list the files.")
    s = e2e.session(provider="anthropic", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "list files")
    e2e.runtime.settle()
    [request] = e2e.events(s.id, "approval_request")
    e2e.runtime.resolve_approval(request.id, "deny")
    e2e.runtime.settle()
    [denied] = _tool_results(stub)
    assert denied.get("is_error") and "Permission denied by user" in str(denied["content"])
    assert len(stub.message_requests) == 2
    assert e2e.events(s.id, "assistant")[-1].content == "Understood, I will not list the files."


def test_human_denial_ends_the_turn_when_configured(make_e2e, stub):
    provider = AnthropicProvider("test-key", base_url=stub.url)
    cfg = Config().replace(sdk_loop={"retry_max_attempts": 5, "stop_on_denial": True})
    e2e = make_e2e({"anthropic": provider}, cfg)
    stub.add_tool_use([("run_command", {"command": "ls"})])
    s = e2e.session(provider="anthropic", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "list files")
    e2e.runtime.settle()
    [request] = e2e.events(s.id, "approval_request")
    e2e.runtime.resolve_approval(request.id, "deny")
    e2e.runtime.settle()
    assert e2e.events(s.id, "result")[-1].subtype == "stopped"
    assert len(stub.message_requests) == 1  # the turn stopped: no further model call


@pytest.mark.parametrize("mode", ["default", "plan", "auto-edit", "full-auto"])
def test_protected_paths_are_denied_in_every_mode(e2e, stub, project_dir, mode):
    stub.add_tool_use([("write_file", {"path": ".env", "content": "SECRET=stolen"})])
    stub.add_tool_use([("run_command", {"command": "echo x >> .env"})])
    stub.add_reply("I could not.")
    s = e2e.session(provider="anthropic", model=MODEL, mode=mode)
    e2e.runtime.start_process(s.id, "overwrite the env file")
    e2e.runtime.settle()
    assert e2e.events(s.id, "approval_request") == []  # denied before any mode or approval
    assert (project_dir / ".env").read_text() == "SECRET=do-not-touch\n"
    results = _tool_results(stub)
    assert len(results) == 2 and all(r.get("is_error") for r in results)
    assert all("protected" in str(r["content"]).lower() for r in results)


def test_full_auto_runs_commands_without_asking_and_hides_secrets(e2e, stub, monkeypatch):
    monkeypatch.setenv("WALLET_ENCRYPTION_KEY", "super-secret-value")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-leak")
    stub.add_tool_use([("run_command", {"command": "env"})])
    stub.add_reply("done")
    s = e2e.session(provider="anthropic", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "print the environment")
    e2e.runtime.settle()
    assert e2e.events(s.id, "approval_request") == []
    [result] = _tool_results(stub)
    output = str(result["content"])
    assert "PATH=" in output
    assert "super-secret-value" not in output and "sk-ant-leak" not in output


def test_retries_at_plus_2_and_plus_4_seconds_in_simulated_time(e2e, stub):
    stub.add_fault("http_529")
    stub.add_fault("http_500")
    stub.add_reply("third time lucky")
    s = e2e.session(provider="anthropic", model=MODEL)
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    retries = e2e.events(s.id, "retry")
    assert [(r.attempt, r.delay_s) for r in retries] == [(1, 2.0)]
    assert retries[0].due_at.endswith("00:00:02.000Z")
    e2e.clock.advance(2)
    assert [(r.attempt, r.delay_s) for r in e2e.events(s.id, "retry")] == [(1, 2.0), (2, 4.0)]
    e2e.clock.advance(3.9)
    assert e2e.events(s.id, "assistant") == []
    e2e.clock.advance(0.1)
    assert e2e.events(s.id, "assistant")[-1].content == "third time lucky"


def test_retry_after_header_is_honoured(e2e, stub):
    stub.add_fault("http_429", retry_after_s=7)
    stub.add_reply("ok now")
    s = e2e.session(provider="anthropic", model=MODEL)
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert [r.delay_s for r in e2e.events(s.id, "retry")] == [7.0]
    e2e.clock.advance(7)
    assert e2e.events(s.id, "assistant")[-1].content == "ok now"


def test_third_consecutive_failure_pauses_and_auto_resume_follows(e2e, stub):
    for _ in range(3):
        stub.add_fault("http_529")
    stub.add_reply("back online")
    s = e2e.session(provider="anthropic", model=MODEL, source="chat")
    e2e.runtime.start_process(s.id, "hi")
    e2e.clock.advance(2 + 4)
    assert e2e.runtime.is_paused(s.id)
    assert [e.error_type for e in e2e.events(s.id, "error")] == ["api_outage"]
    assert "session_exited" not in e2e.types(s.id)  # an outage is not an exit
    e2e.clock.advance(5 * 60)  # the health probe (a real HTTP call to the stub) passes
    assert e2e.runtime.is_running(s.id)
    assert e2e.events(s.id, "assistant")[-1].content == "back online"


def test_failed_probe_is_no_attempt_and_is_repeated_a_minute_later_until_a_4xx_answer(e2e, stub):
    for _ in range(3):
        stub.add_fault("http_529")
    stub.add_reply("back online")
    s = e2e.session(provider="anthropic", model=MODEL, source="chat")
    e2e.runtime.start_process(s.id, "hi")
    e2e.clock.advance(2 + 4)
    assert [e.message for e in e2e.events(s.id, "error")] == [
        "Session paused due to API outage — auto-resume in 5min"]
    stub.set_outage(529)  # the probe's real HTTP call gets a 529: not healthy
    e2e.clock.advance(5 * 60)
    e2e.clock.advance(60)
    probes = [r for r in stub.message_requests if r.json == {}]
    assert len(probes) == 2 and e2e.runtime.is_paused(s.id)
    stub.set_outage(None)  # the stub answers the probe's empty body with 400: healthy
    e2e.clock.advance(59)
    assert e2e.runtime.is_paused(s.id)
    e2e.clock.advance(1)
    assert len([r for r in stub.message_requests if r.json == {}]) == 3
    assert e2e.runtime.is_running(s.id)
    assert e2e.events(s.id, "assistant")[-1].content == "back online"
    assert [e.automatic for e in e2e.events(s.id, "session_resumed")] == [True]


def test_auth_error_is_fatal_and_never_retried(e2e, stub):
    stub.add_fault("http_401")
    s = e2e.session(provider="anthropic", model=MODEL)
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert e2e.events(s.id, "retry") == []
    assert [e.error_type for e in e2e.events(s.id, "error")] == ["sdk_error"]
    assert e2e.events(s.id, "session_exited")[-1].code == 1
    assert len(stub.message_requests) == 1


def test_mid_stream_drop_is_retried(e2e, stub):
    stub.add_fault("drop", after_events=3)
    stub.add_reply("recovered")
    s = e2e.session(provider="anthropic", model=MODEL)
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert len(e2e.events(s.id, "retry")) == 1
    e2e.clock.advance(2)
    assert e2e.events(s.id, "assistant")[-1].content == "recovered"


def test_stop_during_a_streamed_reply_closes_the_stream_without_an_error(e2e, stub):
    stub.add_fault("stall", after_events=4)
    s = e2e.session(provider="anthropic", model=MODEL)
    e2e.runtime.start_process(s.id, "tell me a long story")
    assert stub.wait_for(lambda: stub.pending_turns == 0 and len(stub.message_requests) == 1, 2.0)
    e2e.runtime.stop_process(s.id)
    assert stub.wait_for(lambda: len(stub.disconnects) == 1, 2.0), "the stub never saw the disconnect"
    e2e.runtime.settle()
    assert e2e.types(s.id)[-1] == "session_stopped"
    assert e2e.events(s.id, "error") == []


def test_doom_loop_asks_and_deny_stops_the_turn(e2e, stub, project_dir):
    for _ in range(3):
        stub.add_tool_use([("read_file", {"path": "README.md"})])
    s = e2e.session(provider="anthropic", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "read it again and again")
    e2e.runtime.settle()
    [ask] = e2e.events(s.id, "approval_request")
    assert ask.kind == "doom_loop" and ask.tool_name == "read_file"
    e2e.runtime.resolve_approval(ask.id, "deny")
    e2e.runtime.settle()
    assert e2e.events(s.id, "result")[-1].subtype == "stopped"


def test_compaction_when_input_tokens_pass_90_percent(e2e, stub):
    stub.add_reply("big answer", usage={"input_tokens": 190_000, "output_tokens": 10})
    stub.add_reply("Summary: we talked.")  # the compaction call
    stub.add_reply("fresh answer", usage={"input_tokens": 1_000, "output_tokens": 10})
    s = e2e.session(provider="anthropic", model=MODEL)
    e2e.runtime.start_process(s.id, "first")
    e2e.runtime.settle()
    e2e.runtime.send_message(s.id, "second")
    e2e.runtime.settle()
    assert any(e.subtype == "compaction" for e in e2e.events(s.id, "system"))
    assert [(e.error_type, e.severity) for e in e2e.events(s.id, "session_error")] == [("context_compacted", "info")]
    last = stub.message_requests[-1].json
    assert "Summary: we talked." in str(last["messages"][0]["content"])


# --- multimodal user content (issue 12, item 4) ---------------------------------------------

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg=="
PICTURE = [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    {"type": "text", "text": "Answer in one line."},
]


def test_image_blocks_reach_the_api_through_the_real_anthropic_client(e2e, stub):
    stub.add_reply("A single red pixel.")
    stub.add_reply("Also red.")
    s = e2e.session(provider="anthropic", model=MODEL)
    e2e.runtime.start_process(s.id, PICTURE)
    e2e.runtime.settle()
    first = stub.message_requests[-1].json["messages"]
    assert first == [{"role": "user", "content": PICTURE}]  # as given, in order
    assert e2e.events(s.id, "assistant")[-1].content == "A single red pixel."
    # a follow-up picture through send_message joins the conversation the same way
    assert e2e.runtime.send_message(s.id, PICTURE[:2]) is True
    e2e.runtime.settle()
    again = stub.message_requests[-1].json["messages"]
    assert [m["role"] for m in again] == ["user", "assistant", "user"]
    assert again[0]["content"] == PICTURE and again[2]["content"] == PICTURE[:2]
    assert e2e.runtime.internals.store.message_contents(s.id, 5, roles=("user",)) == [("user", PICTURE), ("user", PICTURE[:2])]
