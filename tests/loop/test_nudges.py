"""Nudge reasons and hallucinated tool output (seed invariants 7 and 8), as table tests."""

from __future__ import annotations

import pytest

from corvid_actors.loop.nudges import (
    NUDGE_MESSAGES,
    NudgeReason,
    NudgeRules,
    detect_hallucinated_tool_output,
    detect_nudge_reason,
    nudge_message,
    strip_hallucination,
)

LONG_ESSAY = "Here is how the module works. " * 12  # > 300 chars, ends with "."
MEDIUM = "The configuration is loaded at start-up and then cached for the session. " * 2


@pytest.mark.parametrize(
    ("text", "iteration", "tools_used", "reason"),
    [
        ("I'll look at the file now.", 1, False, NudgeReason.PROMISED_ACTION),
        ("Let me check the tests.", 3, False, NudgeReason.PROMISED_ACTION),
        ("I’m going to run the build.", 2, False, NudgeReason.PROMISED_ACTION),
        ("Let me check the tests.", 4, False, None),  # only on iterations ≤ 3
        ("I'll look at the file now.", 1, True, None),  # tools were used this turn
        ("ok", 1, False, NudgeReason.TOO_SHORT),
        ("Working", 2, False, NudgeReason.TOO_SHORT),
        ("ok", 3, False, None),  # too-short only on iterations ≤ 2
        ("Done.", 1, False, None),  # short but a complete sentence
        ("Would you like me to fix it?", 1, False, NudgeReason.ASKED_INSTEAD_OF_ACTING),
        ("Shall I update the README?", 2, False, NudgeReason.ASKED_INSTEAD_OF_ACTING),
        ("Should I update the README?", 3, False, None),
        ("Let me know if you want the tests too.", 1, False, NudgeReason.ASKED_INSTEAD_OF_ACTING),
        (LONG_ESSAY, 1, False, NudgeReason.WROTE_BUT_DIDNT_ACT),
        (LONG_ESSAY, 2, False, None),  # only on the first iteration
        (MEDIUM, 1, False, None),  # 100..300 chars, complete: a fine answer
        ("", 1, False, NudgeReason.TOO_SHORT),
    ],
)
def test_detect_nudge_reason(
    text: str, iteration: int, tools_used: bool, reason: NudgeReason | None
) -> None:
    assert detect_nudge_reason(text, iteration, tools_used) == reason


def test_reasons_compare_as_strings() -> None:
    assert detect_nudge_reason("ok", 1, False) == "too_short"


def test_rules_are_configurable() -> None:
    rules = NudgeRules(too_short_chars=3, wrote_but_didnt_act_chars=10_000)
    assert detect_nudge_reason("okay", 1, False, rules) is None
    assert detect_nudge_reason(LONG_ESSAY, 1, False, rules) is None


def test_every_reason_has_a_message() -> None:
    assert set(NUDGE_MESSAGES) == set(NudgeReason)
    assert all("tool" in nudge_message(reason) for reason in NudgeReason)


@pytest.mark.parametrize(
    ("text", "hallucinated", "stripped"),
    [
        ("All good, the file has 3 lines.", False, "All good, the file has 3 lines."),
        ("Reading it.\n[Tool Result]\nfile contents", True, "Reading it."),
        ("Here: «tool_output»{}«/tool_output» so done", True, "Here:"),
        ("Output: <<tool_output>> fake <</tool_output>>", True, "Output:"),
        ("text «/tool_output» tail", True, "text"),
        ("<</tool_output>>", True, ""),
    ],
)
def test_hallucination_detect_and_strip(text: str, hallucinated: bool, stripped: str) -> None:
    assert detect_hallucinated_tool_output(text) is hallucinated
    assert strip_hallucination(text) == stripped


def test_the_hallucination_nudge_contains_no_marker() -> None:
    from corvid_actors.loop.nudges import HALLUCINATION_NUDGE

    assert not detect_hallucinated_tool_output(HALLUCINATION_NUDGE)
