"""Stall detection (seed invariants 3 and 4, plus ping-pong), as table tests."""

from __future__ import annotations

import pytest

from corvid_actors.loop.repeats import (
    RepeatTracker,
    StallKind,
    detect_stall,
    normalize_call,
    step_key,
)
from corvid_actors.loop.settings import DirectLoopSettings
from corvid_actors.providers.base import ToolCall

SETTINGS = DirectLoopSettings()


def test_normalize_call_sorts_keys_and_collapses_whitespace() -> None:
    a = normalize_call("edit", {"path": "a.py", "text": "x  =\n 1", "opts": {"b": 1, "a": 2}})
    b = normalize_call("edit", {"opts": {"a": 2, "b": 1}, "text": " x = 1 ", "path": "a.py"})
    assert a == b


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (("read", {"path": "a.py"}), ("read", {"path": "b.py"})),
        (("read", {"path": "a.py"}), ("list", {"path": "a.py"})),
        (("read", {"n": 1}), ("read", {"n": "1"})),
    ],
)
def test_normalize_call_keeps_real_differences(left: tuple, right: tuple) -> None:
    assert normalize_call(*left) != normalize_call(*right)


A = ("read_file", {"path": "index.ts"})
B = ("list_files", {"path": "."})


def _key(name: str, n: int | str = 0) -> tuple[str, str]:
    return normalize_call(name, {"n": n}), name


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([_key("read")] * 2, None),
        ([_key("read")] * 3, StallKind.REPEAT),
        ([_key("list"), *[_key("read")] * 3], StallKind.REPEAT),
        ([_key("read"), _key("read"), _key("list"), _key("read")], None),
        ([_key("read", i) for i in range(4)], None),
        ([_key("read", i) for i in range(5)], StallKind.SAME_TOOL),
        ([_key("read", 0), _key("list", 1)] * 2, None),  # 4 < ping-pong window of 6
        ([_key("read", 0), _key("list", 1)] * 3, StallKind.PING_PONG),
        ([_key("x"), *[_key("read", 0), _key("list", 1)] * 3], StallKind.PING_PONG),
        ([_key("read", 0), _key("read", 1)] * 3, StallKind.SAME_TOOL),  # same tool wins
        ([_key("read", 0), _key("list", 1), _key("grep", 2)] * 2, None),
    ],
)
def test_detect_stall(steps: list[tuple[str, str]], expected: StallKind | None) -> None:
    keys = [key for key, _ in steps]
    names = [name for _, name in steps]
    assert detect_stall(keys, names, SETTINGS) == expected


def test_thresholds_come_from_settings() -> None:
    settings = DirectLoopSettings(max_repeats=2, max_same_tool=3, ping_pong_window=4)
    assert detect_stall(["a", "a"], ["r", "r"], settings) is StallKind.REPEAT
    assert detect_stall(["a", "b", "c"], ["r", "r", "r"], settings) is StallKind.SAME_TOOL
    assert detect_stall(["a", "b", "a", "b"], ["r", "l", "r", "l"], settings) is StallKind.PING_PONG


def test_tracker_reports_on_the_third_identical_step_and_stays_bounded() -> None:
    tracker = RepeatTracker()
    call = (ToolCall("1", *A),)
    results = []
    for _ in range(3):
        tracker, stall = tracker.observe(call, SETTINGS)
        results.append(stall)
    assert results == [None, None, StallKind.REPEAT]
    for i in range(20):
        tracker, _ = tracker.observe((ToolCall(str(i), "t", {"i": i}),), SETTINGS)
    assert len(tracker.keys) == 6 and len(tracker.names) == 6


def test_a_step_with_several_calls_repeats_only_if_all_repeat() -> None:
    both = (ToolCall("1", *A), ToolCall("2", *B))
    assert step_key(both) != step_key(both[:1])
    tracker = RepeatTracker()
    tracker, _ = tracker.observe(both, SETTINGS)
    tracker, _ = tracker.observe(both, SETTINGS)
    tracker, stall = tracker.observe(both[:1], SETTINGS)
    assert stall is None
    assert StallKind.PING_PONG.value == "stall_ping_pong"
