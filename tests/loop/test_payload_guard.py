"""The payload-growth failsafe's rule, baseline and snapshot (OpenAgent seed)."""

from __future__ import annotations

import json

import pytest

from corvid_actors.actors.session_work import request_bytes
from corvid_actors.core.vocabulary import ToolSpec
from corvid_actors.loop.payload_guard import (
    GrowthGuard,
    GuardSettings,
    compact_for_growth,
    has_ballooned,
    message_size,
    reply_size,
    request_size,
    snapshot_dir,
    snapshot_json,
    tools_size,
)
from corvid_actors.loop.summaries import CONTEXT_SUMMARY_HEADER
from corvid_actors.providers.base import ChatMessage, ModelRequest, ModelResponse, ToolCall

DEFAULTS = GuardSettings()


@pytest.mark.parametrize(("size", "baseline", "tripped"), [
    (100_000, None, False),   # nothing to compare with (first request of a turn)
    (5_000, 1_000, True),     # exactly 5x and 4,000 bytes larger
    (4_999, 1_000, False),    # just under 5x
    (1_000, 200, False),      # 5x but only 800 bytes larger: small requests never trip
    (1_225, 245, False),      # 5x, 980 bytes larger
    (1_285, 257, True),       # 5x, 1,028 bytes larger
    (50_000, 20_000, False),  # 2.5x
    (0, 0, False),
])
def test_growth_rule(size, baseline, tripped):
    assert has_ballooned(size, baseline, DEFAULTS) is tripped


def test_disabled_guard_never_trips():
    assert not has_ballooned(10**9, 1, GuardSettings(enabled=False))


def request(*contents: str, system: str = "S") -> ModelRequest:
    return ModelRequest("m", system, tuple(ChatMessage("user", c) for c in contents))


def test_request_size_is_the_session_actors_measure():
    req = ModelRequest("m", "système", (
        ChatMessage("user", "héllo"),
        ChatMessage("assistant", "", tool_calls=(ToolCall("c1", "read_file", {"path": "a.py"}),)),
        ChatMessage("tool", "x" * 100, tool_call_id="c1", tool_name="read_file"),
    ))
    assert request_size(req) == request_bytes(req)
    assert request_size(req) == len("système".encode()) + sum(message_size(m) for m in req.messages)


def test_guard_rebaselines_after_each_reply_so_long_answers_do_not_trip():
    guard = GrowthGuard()
    guard, first = guard.check(request("hi"), DEFAULTS)
    assert not first.tripped and first.baseline is None
    long_answer = ModelResponse(text="y" * 20_000)
    guard = guard.after_reply(0, long_answer)  # request_bytes 0: the checked size is used
    assert guard.baseline == first.size + reply_size(long_answer)
    # the next request carries the long answer plus a small tool result: no trip
    guard, second = guard.check(request("hi", "y" * 20_000, "small result"), DEFAULTS)
    assert not second.tripped
    guard = guard.after_reply(second.size, ModelResponse(text="ok"))
    guard, third = guard.check(request("hi", "y" * 20_000, "z" * 200_000), DEFAULTS)
    assert third.tripped and third.baseline == second.size + reply_size(ModelResponse(text="ok"))


def test_a_new_turn_and_a_compaction_forget_the_baseline():
    for guard in (GrowthGuard(baseline=10).new_turn(), GrowthGuard(baseline=10).compacted()):
        assert not guard.check(request("x" * 100_000), DEFAULTS)[1].tripped


def test_a_trip_is_remembered_until_the_next_turn():
    guard, verdict = GrowthGuard(baseline=10).check(request("x" * 100_000), DEFAULTS)
    assert verdict.tripped and guard.tripped_in_turn
    assert guard.compacted().tripped_in_turn  # a compaction does not end the turn
    assert not guard.new_turn().tripped_in_turn


def test_tool_definitions_count_toward_the_size():
    spec = ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})
    bare = request("hi")
    with_tools = ModelRequest("m", "S", bare.messages, (spec,))
    assert request_size(with_tools) - request_size(bare) == tools_size(with_tools) > len(spec.description)


def test_snapshot_holds_the_refused_request_and_the_numbers():
    req = ModelRequest("m", "SYS", (ChatMessage("user", "go"),
                                    ChatMessage("tool", "big", tool_call_id="c", tool_name="t", is_error=True)))
    _, verdict = GrowthGuard(baseline=10).check(req, DEFAULTS)
    data = json.loads(snapshot_json(req, verdict, DEFAULTS))
    assert data["reason"] == "payload_growth" and data["baseline_bytes"] == 10
    assert data["request_bytes"] == request_size(req) and data["system"] == "SYS"
    assert data["messages"][1] == {"role": "tool", "content": "big", "tool_call_id": "c",
                                   "tool_name": "t", "is_error": True}


def test_compaction_is_one_bounded_summary_whatever_ballooned():
    history = [ChatMessage("user", "fix the parser"),
               ChatMessage("assistant", "", tool_calls=(ToolCall("c1", "run_command", {"command": "make"}),)),
               ChatMessage("tool", "e" * 500_000, tool_call_id="c1", tool_name="run_command")]
    [summary] = compact_for_growth(history)
    assert summary.role == "user" and summary.content.startswith(CONTEXT_SUMMARY_HEADER)
    assert "fix the parser" in summary.content and len(summary.content) < 5_000


def test_snapshot_dir_defaults_under_the_data_dir(tmp_path):
    assert snapshot_dir(str(tmp_path)) == tmp_path / "snapshots"
    assert snapshot_dir(str(tmp_path), str(tmp_path / "x")) == tmp_path / "x"
