"""The journal (issue 40 item 1): what the outside world said, recorded where the loop meets it."""

from __future__ import annotations

import json

import pytest

from corvid_actors.config import Config
from corvid_actors.testing import ScriptedProvider, SimClock, Turn, sim_runtime
from corvid_actors.testing.replay import load_recording
from tests.replay.recording import record_session


def test_the_journal_is_off_unless_asked():
    clock = SimClock()
    runtime = sim_runtime(clock)
    try:
        assert Config().journal.enabled is False
        assert runtime.internals.journal is None
    finally:
        runtime.shutdown()
        clock.close()


def test_a_model_call_is_one_entry_with_its_chunks_tool_calls_usage_and_times():
    recording, facts = record_session()
    models = recording.of("model")
    assert len(models) == facts["requests"] == 4
    ask, reply, crash, back = models
    assert ask["tool_calls"] == [["call_1_0", "list_files", {"path": "."}]] and ask["stop_reason"] == "tool_use"
    assert (ask["requested_at"], ask["ended_at"], ask["messages"], ask["last_user"]) == (0.0, 1.0, 1, "list please")
    # the reply streamed in three chunks after 2 s, 0.5 s apart: one entry, the chunks' sizes
    # (run-length encoded: three chunks of 8 characters)
    assert reply["text"] == "Done here, token=abc123." and reply["chunks"] == [[8, 3]]
    assert (reply["requested_at"], reply["first_chunk_at"], reply["ended_at"]) == (4.0, 6.0, 7.0)
    assert reply["usage"]["output_tokens"] > 0 and reply["messages"] == 3
    assert crash["error"]["kind"] == "fatal" and crash["error"]["message"] == "boom"
    assert back["generation"] == 2 and back["text"] == "back again"


def test_tool_results_approvals_user_messages_and_events_are_journaled():
    recording, _ = record_session()
    [tool] = recording.of("tool")
    assert (tool["name"], tool["arguments"], tool["is_error"], tool["t"]) == ("list_files", {"path": "."}, False, 4.0)
    assert tool["output"] == "(empty directory: .)"
    [approval] = recording.of("approval")
    assert (approval["allowed"], approval["message"], approval["asked"], approval["t"]) == (True, "fine", True, 4.0)
    users = [(u["t"], u["text"], u["begin"]) for u in recording.of("user")]
    assert users[:2] == [(0.0, "list please", True), (30.0, "again", False)]
    assert users[2][0] == 35.0 and users[2][2] is True  # the restart begins with the resume prompt
    types = [(e[0], e[1]) for e in recording.events]
    assert ("session_restarting", 30.0) in types and ("session_started", 35.0) in types
    assert not any(t == "content_block_delta" for t, _ in types)  # chunks are in the model entries
    starts = recording.of("start")
    assert [s["generation"] for s in starts] == [1, 2] and starts[0]["loop"] == "direct"
    assert {"list_files", "run_command"} <= {t["name"] for t in starts[0]["tools"]}


def test_without_content_capture_only_shapes_and_timings_are_kept():
    recording, _ = record_session(config={"journal": {"enabled": True, "capture_content": False}})
    assert recording.capture_content is False
    text = repr(recording.entries)
    for secret in ("list please", "Done here", "again", "(empty directory"):
        assert secret not in text
    reply = recording.of("model")[1]
    assert (reply["text"], reply["chars"], reply["chunks"]) == (None, 24, [[8, 3]])
    assert recording.of("tool")[0]["arguments"] == {"path": None}


def test_an_agent_named_in_journal_agents_is_journaled_and_others_are_not():
    recording, facts = record_session(config={"journal": {"agents": ["watched"]}}, agent="watched")
    assert recording.of("model")
    with pytest.raises(ValueError, match="has no journal entries"):
        record_session(config={"journal": {"agents": ["watched"]}}, agent="someone-else")


def test_entries_older_than_keep_days_are_deleted_when_a_later_session_starts():
    clock = SimClock()
    provider = ScriptedProvider(clock)
    runtime = sim_runtime(clock, provider, config={"journal": {"enabled": True, "keep_days": 1}})
    try:
        old = runtime.create_session()
        provider.for_session(old.id, Turn.reply("hello"))
        runtime.start_process(old.id, "hi")
        clock.advance(60)
        runtime.stop_process(old.id)
        assert load_recording(runtime, old.id).of("model")
        clock.advance(2 * 86400)  # two days: past keep_days, and past the hourly purge check
        new = runtime.create_session()
        runtime.start_process(new.id, "hi")
        clock.advance(60)
        with pytest.raises(ValueError, match="no journal entries"):
            load_recording(runtime, old.id)
        assert load_recording(runtime, new.id).of("model")
    finally:
        runtime.shutdown()
        clock.close()


def test_many_chunks_are_one_row_and_the_journal_stays_small():
    long_text = " ".join(f"word{i}" for i in range(400))
    recording, facts = record_session(turns=(Turn.reply(long_text, deltas=200, latency_s=1),))
    model = recording.of("model")[0]
    sizes = [size for size, times in model["chunks"] for _ in range(times)]
    assert len(sizes) >= 150 and sum(sizes) == len(long_text)
    # stored compressed: well under the entries' JSON
    assert 0 < facts["bytes"] < len(json.dumps(recording.entries)) / 2


def test_a_session_started_again_after_a_stop_is_journaled_again():
    clock = SimClock()
    provider = ScriptedProvider(clock)
    runtime = sim_runtime(clock, provider, config={"journal": {"enabled": True}})
    try:
        session = runtime.create_session()
        provider.for_session(session.id, Turn.reply("one"), Turn.reply("two"))
        runtime.start_process(session.id, "first")
        clock.advance(10)
        runtime.stop_process(session.id)
        clock.advance(10)
        runtime.start_process(session.id, "second")
        clock.advance(10)
        recording = load_recording(runtime, session.id)
        types = [e[0] for e in recording.events]
        assert types.count("session_started") == 2 and types.count("assistant") == 2
        assert types.index("session_stopped") < len(types) - 1  # the events after the stop are kept
        assert [e[2]["content"] for e in recording.events if e[0] == "assistant"] == ["one", "two"]
    finally:
        runtime.shutdown()
        clock.close()
