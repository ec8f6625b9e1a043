"""Tool-result capping (seed invariant 6), as table tests."""

from __future__ import annotations

import json

import pytest

from corvid_actors.loop.direct import DirectLoopSettings
from corvid_actors.loop.tool_results import cap_tool_result, max_tool_result_chars

SETTINGS = DirectLoopSettings()


@pytest.mark.parametrize(
    ("window", "used", "expected"),
    [
        (8192, 0, int(8192 * 0.30 * 4)),  # 30 % of the window is the absolute cap
        (8192, 7000, int((8192 - 7000) * 0.60 * 4)),  # pressure: 60 % of what is left
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


def test_plain_text_is_cut_with_count_of_omitted_chars() -> None:
    capped = cap_tool_result("a" * 600 + "b" * 900, 1000)
    assert capped.startswith("a" * 600 + "b" * 400)
    assert capped.endswith("[... truncated, 500 chars omitted]")
    assert "b" * 401 not in capped


def test_json_keeps_head_and_tail_around_a_marker() -> None:
    text = json.dumps({"items": list(range(2000)), "end": "TAIL"})
    capped = cap_tool_result(text, 1000)
    head, _, rest = capped.partition("\n[... ")
    marker, _, tail = rest.partition("\n")
    assert head == text[:700]
    assert tail == text[-200:] and tail.endswith('"TAIL"}')
    assert marker == f"{len(text) - 900} chars omitted ...]"


def test_leading_whitespace_before_bracket_still_counts_as_json() -> None:
    capped = cap_tool_result("  [" + "1, " * 1000 + "2]", 100)
    assert capped.endswith("2]")
