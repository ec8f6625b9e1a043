"""Direct-process seed over the real ollama client and the stub server, driven through the
runtime (supervisor → session actor → DirectLoop → OllamaProvider → socket)."""

from __future__ import annotations

import pytest

from corvid_actors.config import Config
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing.ollama_stub import OllamaStubServer

MODEL = "llama3.1:8b"  # native tools, 8B → slot weight 2


@pytest.fixture
def stub():
    with OllamaStubServer() as server:
        yield server


def make(make_e2e, stub, **slots):
    cfg = Config().replace(slots={"max_parallel": 4, **slots})
    return make_e2e({"ollama": OllamaProvider(stub.url)}, cfg)


@pytest.fixture
def e2e(make_e2e, stub):
    return make(make_e2e, stub)


def tool_messages(request):
    return [m for m in request.json["messages"] if m["role"] == "tool"]


def test_normal_tool_loop_three_calls_then_text_releases_the_slot(e2e, stub):
    stub.add_tool_calls([("list_files", {"path": "."})])
    stub.add_tool_calls([("read_file", {"path": "README.md"})])
    stub.add_tool_calls([("search_files", {"pattern": "hello"})])
    stub.add_reply("The project says hello.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "what is in this project?")
    e2e.runtime.settle()
    assert e2e.events(s.id, "assistant")[-1].content == "The project says hello."
    [result] = e2e.events(s.id, "result")
    assert result.metrics["tool_calls"] == 3
    assert result.metrics["termination_reason"] == "normal"
    assert [e.name for e in e2e.events(s.id, "content_block_start")] == ["list_files", "read_file", "search_files"]
    assert "hello from the project" in tool_messages(stub.chat_requests[-1])[1]["content"]
    assert e2e.runtime.slot_stats()["in_use"] == 0
    body = stub.chat_requests[0].json
    assert body["options"]["num_ctx"] == 8192 and body["options"]["num_predict"] == 2048
    assert body["keep_alive"] == "5m"


def test_repeat_detection_breaks_with_a_summary_without_tools(e2e, stub):
    for _ in range(3):
        stub.add_tool_calls([("read_file", {"path": "README.md"})])
    stub.add_reply("Summary: I read the README three times.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    last = stub.chat_requests[-1].json
    assert not last.get("tools")  # the epilogue call has tools disabled
    assert e2e.events(s.id, "result")[-1].metrics["termination_reason"] == "stall_repeat"
    assert e2e.events(s.id, "assistant")[-1].content.startswith("Summary:")
    assert e2e.runtime.slot_stats()["in_use"] == 0


def test_hallucinated_tool_output_is_not_kept_and_the_model_is_nudged(e2e, stub):
    stub.add_tool_calls([("read_file", {"path": "README.md"})])
    stub.add_reply("«tool_output» fake result «/tool_output» all done")
    stub.add_reply("Real answer.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    contents = [e.content for e in e2e.events(s.id, "assistant")]
    assert contents == ["Real answer."]
    last_messages = stub.chat_requests[-1].json["messages"]
    assert not any("fake result" in m.get("content", "") for m in last_messages)
    assert e2e.events(s.id, "result")[-1].metrics["mid_chain_nudges"] == 1


def test_council_member_gets_no_tools_and_a_reasoning_prompt(e2e, stub):
    stub.add_reply("My position: yes.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto", council_role="member")
    e2e.runtime.start_process(s.id, "should we ship?")
    e2e.runtime.settle()
    body = stub.chat_requests[-1].json
    assert not body.get("tools")
    assert "council" in body["messages"][0]["content"].lower()


def test_default_mode_asks_for_every_tool_and_denial_is_a_text_result(e2e, stub):
    stub.add_tool_calls([("read_file", {"path": "README.md"})])
    stub.add_reply("Fine, I will not.")
    s = e2e.session(provider="ollama", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    [ask] = e2e.events(s.id, "approval_request")
    assert ask.tool_name == "read_file"
    e2e.runtime.resolve_approval(ask.id, "deny")
    e2e.runtime.settle()
    assert "Permission denied" in tool_messages(stub.chat_requests[-1])[0]["content"]
    assert e2e.events(s.id, "assistant")[-1].content == "Fine, I will not."


def test_unknown_tool_and_malformed_arguments_are_text_results(e2e, stub):
    stub.add_tool_calls([("launch_rockets", {"count": 3})])
    stub.add_tool_calls([("read_file", {"offset": "not-a-number"})])
    stub.add_reply("ok")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    results = [m["content"] for m in tool_messages(stub.chat_requests[-1])]
    assert "Unknown tool: launch_rockets" in results[0]
    assert "path" in results[1]  # the missing required parameter is named
    assert e2e.events(s.id, "session_exited") == []  # the loop goes on


def test_tool_timeout_is_a_text_result_and_the_loop_goes_on(e2e, stub):
    stub.add_tool_calls([("run_command", {"command": "sleep 5", "timeout": 0.3})])
    stub.add_reply("It timed out.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "sleep")
    e2e.runtime.settle(timeout_s=4)
    [result] = tool_messages(stub.chat_requests[-1])
    assert "timed out" in result["content"].lower()
    assert e2e.events(s.id, "assistant")[-1].content == "It timed out."


def test_tools_unsupported_disables_tools_for_the_session_and_retries(e2e, stub):
    stub.add_fault("no_tools")
    stub.add_reply("plain answer")
    stub.add_reply("second plain answer")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert stub.chat_requests[0].json.get("tools")
    assert not stub.chat_requests[1].json.get("tools")
    e2e.runtime.send_message(s.id, "again")
    e2e.runtime.settle()
    assert not stub.chat_requests[2].json.get("tools")  # for the rest of the session


def test_context_overflow_keeps_summary_and_last_messages_and_retries_once(e2e, stub):
    stub.add_fault("context_length")
    stub.add_reply("It fits now.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert e2e.events(s.id, "assistant")[-1].content == "It fits now."
    assert len(stub.chat_requests) == 2


def test_fatal_provider_error_emits_error_exits_1_and_releases_the_slot(e2e, stub):
    stub.add_fault("http_500", status=400, error="invalid request: unknown field")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert [e.error_type for e in e2e.events(s.id, "error")] == ["direct_process_error"]
    assert e2e.events(s.id, "session_exited")[-1].code == 1
    assert e2e.runtime.slot_stats()["in_use"] == 0


def test_connection_refused_retries_then_pauses_the_session(make_e2e):
    e2e = make_e2e({"ollama": OllamaProvider("http://127.0.0.1:9")})  # nothing listens there
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto", source="chat")
    e2e.runtime.start_process(s.id, "hi")
    e2e.clock.advance(60)
    assert e2e.runtime.is_paused(s.id)
    assert [e.error_type for e in e2e.events(s.id, "error")] == ["api_outage"]
    assert len(e2e.events(s.id, "retry")) == 2
    assert e2e.runtime.slot_stats()["in_use"] == 0


def test_stop_during_a_streamed_reply_closes_the_stream_and_releases_the_slot(e2e, stub):
    stub.add_fault("slow", text=" ".join(f"word{i}" for i in range(200)), delay_s=0.02)
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "a long story")
    assert stub.wait_for(lambda: stub.active_streams == 1, 2.0)
    e2e.runtime.stop_process(s.id)
    assert stub.wait_for(lambda: stub.disconnects >= 1, 2.0), "the stub never saw the disconnect"
    e2e.runtime.settle()
    assert e2e.types(s.id)[-1] == "session_stopped"
    assert e2e.runtime.slot_stats()["in_use"] == 0


def test_slot_wait_times_out_after_five_minutes_with_slot_timeout(make_e2e, stub):
    e2e = make(make_e2e, stub, max_parallel=1)
    stub.add_fault("slow", text=" ".join(f"w{i}" for i in range(400)), delay_s=0.01, match="hog")
    hog = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    waiter = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(hog.id, "hog the slot")
    assert stub.wait_for(lambda: stub.active_streams == 1, 2.0)
    e2e.runtime.start_process(waiter.id, "wait for it")
    e2e.runtime.stop_process(hog.id)  # frees the slot, but only after the waiter timed out below?
    e2e.runtime.settle()
    # the waiter got the slot once the hog stopped: no timeout
    assert e2e.events(waiter.id, "error") == []


def test_slot_timeout_error_and_exit_1(make_e2e, stub):
    e2e = make(make_e2e, stub, max_parallel=1)
    e2e.runtime.internals.slot_pool.tell(__import__("corvid_actors.actors.slots", fromlist=["x"]).AcquireSlot(
        "someone-else", 1, MODEL, 1, e2e.runtime.internals.timers))  # the slot is held by another host task
    e2e.runtime.settle()
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert any(q.status_message.startswith("Queued") for q in e2e.events(s.id, "queue_status"))
    e2e.clock.advance(299)
    assert e2e.events(s.id, "error") == []
    e2e.clock.advance(1)
    [error] = e2e.events(s.id, "error")
    assert error.error_type == "slot_timeout" and MODEL in error.message
    assert e2e.events(s.id, "session_exited")[-1].code == 1


def test_abort_while_waiting_for_a_slot_releases_nothing_it_never_had(make_e2e, stub):
    e2e = make(make_e2e, stub, max_parallel=1)
    stub.add_fault("slow", text=" ".join(f"w{i}" for i in range(300)), delay_s=0.01, match="hog")
    hog = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    waiter = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(hog.id, "hog the slot")
    assert stub.wait_for(lambda: stub.active_streams == 1, 2.0)
    e2e.runtime.start_process(waiter.id, "wait")
    e2e.runtime.stop_process(waiter.id)
    stats = e2e.runtime.slot_stats()
    assert stats["waiting"] == 0 and list(stats["held"]) == [hog.id]
    e2e.runtime.stop_process(hog.id)
    e2e.runtime.settle()
    assert e2e.runtime.slot_stats()["in_use"] == 0


def test_fifty_sessions_never_exceed_a_capacity_two_pool(make_e2e, stub):
    e2e = make(make_e2e, stub, max_parallel=2)
    stub.default_reply = "done"
    sessions = [e2e.session(provider="ollama", model="qwen2.5:0.5b", mode="full-auto") for _ in range(50)]
    for s in sessions:
        e2e.runtime.start_process(s.id, f"task for {s.id}")
    e2e.runtime.settle(timeout_s=60)
    stats = e2e.runtime.slot_stats()
    assert stats["peak_in_use"] <= 2
    assert stats["in_use"] == 0 and stats["waiting"] == 0
    assert stats["grants"] == 50
    assert all(e2e.events(s.id, "assistant")[-1].content == "done" for s in sessions)


def test_heavy_model_weighs_three(make_e2e, stub):
    e2e = make(make_e2e, stub, max_parallel=3)
    stub.add_fault("slow", text=" ".join(f"w{i}" for i in range(300)), delay_s=0.01)
    s = e2e.session(provider="ollama", model="qwen2.5-coder:14b", mode="full-auto")
    e2e.runtime.start_process(s.id, "big model")
    assert stub.wait_for(lambda: stub.active_streams == 1, 2.0)
    assert e2e.runtime.slot_stats()["held"] == {s.id: 3}
    e2e.runtime.stop_process(s.id)
    e2e.runtime.settle()


def test_text_based_tool_calling_for_qwen3(e2e, stub):
    stub.add_reply('```json\n[{"name": "read_file", "arguments": {"file_path": "README.md"}}]\n```')
    stub.add_reply("It says hello.")
    s = e2e.session(provider="ollama", model="qwen3:8b", mode="full-auto")
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    first, second = stub.chat_requests[0].json, stub.chat_requests[1].json
    assert not first.get("tools")  # text-based: no native tools param
    assert "read_file" in first["messages"][0]["content"]  # instructions in the system prompt
    wrapped = second["messages"][-1]["content"]
    assert "«tool_output»" in wrapped and "hello from the project" in wrapped
    assert e2e.events(s.id, "assistant")[-1].content == "It says hello."


# --- multimodal user content (issue 12, item 4) ---------------------------------------------

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg=="
PICTURE = [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    {"type": "image", "source": {"type": "url", "url": "https://example.org/cat.jpg"}},
]


def test_a_vision_model_gets_the_base64_images_in_the_ollama_images_field(e2e, stub):
    stub.add_reply("A single red pixel.")
    s = e2e.session(provider="ollama", model="llava:7b")  # /api/show lists "vision"
    e2e.runtime.start_process(s.id, PICTURE)
    e2e.runtime.settle()
    [user] = [m for m in stub.chat_requests[-1].json["messages"] if m["role"] == "user"]
    # the real client sent the image bytes base64-encoded; Ollama cannot fetch the url image
    assert user == {"role": "user", "content": "What is in this picture?", "images": [PNG]}
    assert e2e.events(s.id, "assistant")[-1].content == "A single red pixel."


def test_a_text_model_gets_the_text_parts_only(e2e, stub):
    stub.add_reply("I cannot see images.")
    s = e2e.session(provider="ollama", model=MODEL)  # no "vision" capability
    e2e.runtime.start_process(s.id, PICTURE)
    e2e.runtime.settle()
    [user] = [m for m in stub.chat_requests[-1].json["messages"] if m["role"] == "user"]
    assert user["content"] == "What is in this picture?" and "images" not in user
    assert e2e.runtime.internals.store.message_contents(s.id, 1, roles=("user",)) == [("user", PICTURE)]
