"""Issue 12 (items 12–19): the direct process as the original behaves, through the runtime
over the real ollama client and the stub server (routing, summary epilogue, tool-result caps,
queue_status, text tool calls, approvals)."""

from __future__ import annotations

import pytest

from corvid_actors.config import Config
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing import arrange
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


def provider_notes(e2e, sid):
    return [e.message for e in e2e.events(sid, "system") if e.subtype == "provider_selected"]


# --- item 12: fallback routing ----------------------------------------------------------


def test_fallback_to_ollama_replaces_a_cloud_model_with_the_ollama_default(e2e, stub):
    stub.default_reply = "hello"
    s = e2e.session(provider="", model="claude-sonnet-4-6")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert stub.chat_requests[-1].json["model"] == Config().providers.ollama_default_model == "qwen3:8b"
    assert provider_notes(e2e, s.id) == ["Provider: ollama (fallback: no_claude_access)"]
    assert e2e.events(s.id, "assistant")[-1].content == "hello"


@pytest.mark.parametrize("model", ["llama3.1:8b", "qwen2.5-coder", "llama3", "mistral:7b"])
def test_fallback_keeps_a_model_name_that_looks_like_an_ollama_model(e2e, stub, model):
    stub.default_reply = "hello"
    s = e2e.session(provider="", model=model)
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert stub.chat_requests[-1].json["model"] == model
    assert provider_notes(e2e, s.id) == ["Provider: ollama (fallback: no_claude_access)"]


def test_an_explicit_ollama_provider_is_no_fallback_and_keeps_its_model(e2e, stub):
    stub.default_reply = "hello"
    s = e2e.session(provider="ollama", model="claude-sonnet-4-6")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert stub.chat_requests[-1].json["model"] == "claude-sonnet-4-6"  # the operator chose it
    assert provider_notes(e2e, s.id) == ["Provider: ollama (claude-sonnet-4-6)"]


# --- items 14 and 15: the summary epilogue and the third hallucinated reply ---------------


def test_summary_epilogue_asks_in_the_original_words_and_emits_the_summary(e2e, stub):
    for _ in range(3):
        stub.add_tool_calls([("read_file", {"path": "README.md"})])
    stub.add_reply("I read the README; it says hello.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    last = stub.chat_requests[-1].json
    assert not last.get("tools")
    assert last["messages"][-1] == {
        "role": "user",
        "content": "Summarize what you accomplished. Be concise — state the key actions taken and their results.",
    }
    assert e2e.events(s.id, "assistant")[-1].content == "I read the README; it says hello."


def test_a_failed_summary_call_ends_the_turn_normally_and_the_session_stays(e2e, stub):
    for _ in range(3):
        stub.add_tool_calls([("read_file", {"path": "README.md"})])
    stub.add_fault("http_500", status=400, error="invalid request: unknown field")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    assert e2e.events(s.id, "error") == []
    assert e2e.events(s.id, "session_exited") == []
    assert e2e.runtime.is_running(s.id)
    [result] = e2e.events(s.id, "result")
    assert result.subtype == "success" and result.metrics["termination_reason"] == "stall_repeat"
    notes = [e.message for e in e2e.events(s.id, "system") if e.subtype == "summary_failed"]
    assert len(notes) == 1 and notes[0].startswith("Final summary call failed: ")
    assert e2e.runtime.slot_stats()["in_use"] == 0
    stub.add_reply("Still here.")
    assert e2e.runtime.send_message(s.id, "are you there?")
    e2e.runtime.settle()
    assert e2e.events(s.id, "assistant")[-1].content == "Still here."


def test_the_third_hallucinated_reply_is_emitted_as_the_turns_assistant_text(e2e, stub):
    fake = "[Tool Result] the file says hello"
    stub.add_tool_calls([("read_file", {"path": "README.md"})])
    for _ in range(5):
        stub.add_reply(fake)
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")  # limited tier: 4 mid-chain nudges
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    assert [e.content for e in e2e.events(s.id, "assistant")] == [fake]
    [result] = e2e.events(s.id, "result")
    assert result.subtype == "success" and result.metrics["mid_chain_nudges"] == 4
    assert len(stub.chat_requests) == 6


# --- item 16: tool results and trimming in the original's format -------------------------


def test_old_tool_results_are_cut_in_the_original_format(e2e, stub, project_dir):
    (project_dir / "big.txt").write_text("".join(f"row {i}\n" for i in range(600)))
    stub.add_tool_calls([("read_file", {"path": "big.txt"})])
    stub.add_tool_calls([("list_files", {"path": "."})])
    stub.add_tool_calls([("search_files", {"pattern": "hello"})])
    stub.add_reply("Done.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "look around")
    e2e.runtime.settle()
    first_result = [m for m in stub.chat_requests[-1].json["messages"] if m["role"] == "tool"][0]["content"]
    full = [m for m in stub.chat_requests[1].json["messages"] if m["role"] == "tool"][0]["content"]
    assert len(full) > 500 and full.startswith("1\trow 0")
    assert first_result == f"{full[:500]}... [truncated, was {len(full)} chars]"


# --- item 17: queue_status only while really waiting --------------------------------------


def test_an_immediate_slot_grant_publishes_no_queue_status(e2e, stub):
    stub.default_reply = "hello"
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert e2e.runtime.send_message(s.id, "again")
    e2e.runtime.settle()
    assert len(e2e.events(s.id, "result")) == 2
    assert e2e.events(s.id, "queue_status") == []


def test_a_real_wait_publishes_the_waiting_text_then_an_empty_status(make_e2e, stub):
    from corvid_actors.actors.slots import AcquireSlot, ReleaseSlot

    e2e = make(make_e2e, stub, max_parallel=1)
    stub.default_reply = "hello"
    e2e.runtime.internals.slot_pool.tell(AcquireSlot("someone-else", 1, MODEL, 1, e2e.runtime.internals.timers))
    e2e.runtime.settle()
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    waiting = [q.status_message for q in e2e.events(s.id, "queue_status")]
    assert waiting == ["Queued — waiting for model slot (need 2, 1/1 in use, position 1)"]
    assert e2e.events(s.id, "result") == []
    e2e.clock.advance(30)
    e2e.runtime.internals.slot_pool.tell(ReleaseSlot("someone-else"))
    e2e.runtime.settle()
    assert [q.status_message for q in e2e.events(s.id, "queue_status")] == [waiting[0], ""]
    assert e2e.events(s.id, "assistant")[-1].content == "hello"
    # the next turn gets the slot at once: no status at all
    assert e2e.runtime.send_message(s.id, "again")
    e2e.runtime.settle()
    assert len(e2e.events(s.id, "queue_status")) == 2


# --- item 19: approval_request only when a human is asked; 8-character ids -----------------


def test_an_approval_request_has_an_8_character_id_and_is_resolved_by_it(e2e, stub):
    stub.add_tool_calls([("read_file", {"path": "README.md"})])
    stub.add_reply("Read it.")
    s = e2e.session(provider="ollama", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    [ask] = e2e.events(s.id, "approval_request")
    assert len(ask.id) == 8 and all(c in "0123456789abcdef" for c in ask.id)
    assert [p["id"] for p in e2e.runtime.list_approvals(s.id)] == [ask.id]
    assert e2e.runtime.resolve_approval(ask.id[:4], "allow") is not None  # a prefix resolves it
    e2e.runtime.settle()
    assert [r.id for r in e2e.events(s.id, "approval_resolved")] == [ask.id]
    assert e2e.events(s.id, "assistant")[-1].content == "Read it."


def test_paused_mode_denies_without_publishing_an_approval_request(e2e, stub):
    e2e.runtime.set_approval_mode("paused")
    stub.add_tool_calls([("read_file", {"path": "README.md"})])
    stub.add_reply("Denied, so I stop.")
    s = e2e.session(provider="ollama", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    assert e2e.events(s.id, "approval_request") == []
    assert e2e.events(s.id, "approval_resolved") == []
    denied = [m for m in stub.chat_requests[-1].json["messages"] if m["role"] == "tool"][0]["content"]
    assert denied == ("Permission denied for tool: read_file: "
                      "System is in paused mode — all tool requests denied")
    assert e2e.events(s.id, "assistant")[-1].content == "Denied, so I stop."


def test_a_session_wide_grant_answers_later_requests_without_asking(e2e, stub):
    for path in ("README.md", ".", "README.md"):
        stub.add_tool_calls([("list_files" if path == "." else "read_file", {"path": path})])
    stub.add_reply("Done.")
    s = e2e.session(provider="ollama", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "look")
    e2e.runtime.settle()
    [first] = e2e.events(s.id, "approval_request")
    e2e.runtime.resolve_approval(first.id, "allow_session")
    e2e.runtime.settle()
    second = e2e.events(s.id, "approval_request")[-1]
    assert second.tool_name == "list_files" and second.id != first.id
    e2e.runtime.resolve_approval(second.id, "allow")
    e2e.runtime.settle()
    # the second read_file is granted by the session grant: nobody is asked, nothing published
    assert [a.tool_name for a in e2e.events(s.id, "approval_request")] == ["read_file", "list_files"]
    assert [r.id for r in e2e.events(s.id, "approval_resolved")] == [first.id, second.id]
    assert e2e.events(s.id, "assistant")[-1].content == "Done."
    assert len([m for m in stub.chat_requests[-1].json["messages"] if m["role"] == "tool"]) == 3


# --- item 18: text tool calls in every form of the original, one run per call ---------------


def test_a_python_style_text_call_runs_the_tool(e2e, stub):
    stub.add_reply('Let me read it.\nread_file(path="README.md")')
    stub.add_reply("It says hello.")
    s = e2e.session(provider="ollama", model="qwen3:8b", mode="full-auto")  # text-based tool calls
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    assert [(b.name, b.input) for b in e2e.events(s.id, "content_block_start")] == [
        ("read_file", {"path": "README.md"})]
    wrapped = stub.chat_requests[1].json["messages"][-1]["content"]
    assert "hello from the project" in wrapped
    assert e2e.events(s.id, "assistant")[-1].content == "It says hello."


def test_one_call_written_in_several_forms_runs_once(e2e, stub):
    stub.add_reply(
        '<tool_call>{"name": "read_file", "arguments": {"path": "README.md"}}</tool_call>\n'
        'In JSON: ```json\n[{"name": "read_file", "arguments": {"path": "README.md"}}]\n```\n'
        'or read_file(path="README.md")'
    )
    stub.add_reply("Done.")
    s = e2e.session(provider="ollama", model="qwen3:8b", mode="full-auto")
    e2e.runtime.start_process(s.id, "read the readme")
    e2e.runtime.settle()
    assert [b.name for b in e2e.events(s.id, "content_block_start")] == ["read_file"]
    [result] = e2e.events(s.id, "result")
    assert result.metrics["tool_calls"] == 1


# --- item 13: the tool permission chain --------------------------------------------------
# Bundle tools are ADDED to the default core tools when the agent has no explicit list
# (the original since #1319: "skill bundles no longer drop default tools when base
# permissions are null"; reference §10: "if base is NULL, start from DEFAULT_CORE_TOOLS"),
# and only that list is offered (issue 34 item 8): the core tools are the runtime's own,
# not the coding tools, which a bundle must name.


def offered_tools(stub):
    """The tools the last model call offered (update_plan is the loop's own, always there)."""
    return sorted(t["function"]["name"] for t in stub.chat_requests[-1].json["tools"]
                  if t["function"]["name"] != "update_plan")


def start_with_bundle(e2e, explicit):
    agent = e2e.runtime.create_agent(f"bundled-{explicit}", provider="ollama", model=MODEL,
                                     permission_mode="full-auto", tool_permissions=explicit)
    arrange(e2e.runtime).skill_bundle(f"reader-{explicit}", tools=["read_file"], agents=[agent])
    s = e2e.runtime.create_session(agent_id=agent.id, project_id=e2e.project.id)
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()


def test_bundle_tools_extend_the_core_tools_when_the_agent_has_no_list(e2e, stub):
    stub.default_reply = "All good."
    plain = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(plain.id, "hi")
    e2e.runtime.settle()
    defaults = offered_tools(stub)  # no list, no bundle: every tool
    assert "write_file" in defaults and any(name.startswith("corvid_") for name in defaults)
    start_with_bundle(e2e, None)
    assert len(stub.chat_requests) == 2
    core = [name for name in defaults if name.startswith("corvid_")]
    assert offered_tools(stub) == sorted([*core, "read_file"])  # no write_file, run_command, …


def test_bundle_tools_extend_an_explicit_list(e2e, stub):
    stub.default_reply = "All good."
    start_with_bundle(e2e, ["list_files"])
    assert offered_tools(stub) == ["list_files", "read_file"]
