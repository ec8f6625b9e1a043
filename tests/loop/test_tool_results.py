"""Tool-result capping (seed invariant 6), as table tests."""

from __future__ import annotations

import json

import pytest

from corvid_actors.loop.settings import DirectLoopSettings
from corvid_actors.loop.tool_results import cap_tool_result, max_tool_result_chars

SETTINGS = DirectLoopSettings()


@pytest.mark.parametrize(
    ("window", "used", "expected"),
    [
        (8192, 0, 2457 * 4),  # ⌊0.3 × 8192⌋ × 4 = 9828 (the original floors tokens first)
        (8191, 0, 2457 * 4),  # ⌊2457.3⌋ × 4 = 9828, not ⌊9829.2⌋
        (8192, 7000, 715 * 4),  # pressure: ⌊0.6 × (8192 − 7000)⌋ × 4
        (8192, 8000, 1000),  # floor
        (8192, 9000, 1000),  # over budget: still the floor
        (1000, 0, 1200),  # 30 % × 1000 × 4
        (100, 0, 1000),  # tiny window: floor
        (128_000, 10_000, int(128_000 * 0.30 * 4)),
    ],
)
def test_max_tool_result_chars(window: int, used: int, expected: int) -> None:
    assert max_tool_result_chars(window, used, SETTINGS) == expected


def test_max_tool_result_chars_follows_settings() -> None:
    settings = DirectLoopSettings(tool_result_share=0.10, tool_result_min_chars=50)
    assert max_tool_result_chars(1000, 0, settings) == 400
    assert max_tool_result_chars(1000, 990, settings) == 50


def test_result_that_fits_is_unchanged() -> None:
    assert cap_tool_result("x" * 1000, 1000) == "x" * 1000


def test_plain_text_is_cut_in_the_original_format() -> None:
    text = "a" * 600 + "b" * 900
    assert cap_tool_result(text, 1000) == "a" * 600 + "b" * 400 + "\n\n[... truncated, 500 chars omitted]"


def test_json_keeps_head_and_tail_around_the_original_marker() -> None:
    text = json.dumps({"items": list(range(2000)), "end": "TAIL"})
    capped = cap_tool_result(text, 1001)  # ⌊700.7⌋ head, ⌊200.2⌋ tail
    omitted = len(text) - 700 - 200
    assert capped == text[:700] + f"\n\n[... {omitted} chars omitted ...]\n\n" + text[-200:]
    assert capped.endswith('"TAIL"}')


def test_leading_whitespace_before_bracket_still_counts_as_json() -> None:
    capped = cap_tool_result("  [" + "1, " * 1000 + "2]", 100)
    assert capped.endswith("2]")
