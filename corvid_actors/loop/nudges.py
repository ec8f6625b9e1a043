"""Nudges: detecting a model that talks instead of acting, and fake tool output.

Small local models often answer a task with a promise ("I'll look at the file"), a
question ("Shall I fix it?") or an essay, without calling a tool; or, mid-chain, they
write the tool's output themselves. The direct loop answers each case with a short
user message (a nudge) and calls the model again, within per-turn budgets.

Everything here is pure: regexes and thresholds in, a reason or a text out.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class NudgeReason(enum.StrEnum):
    """Why a text-only reply (with no tool used yet this turn) gets a nudge."""

    PROMISED_ACTION = "promised_action"
    TOO_SHORT = "too_short"
    ASKED_INSTEAD_OF_ACTING = "asked_instead_of_acting"
    WROTE_BUT_DIDNT_ACT = "wrote_but_didnt_act"


@dataclass(frozen=True)
class NudgeRules:
    """When each nudge applies (iterations count from 1 within a turn)."""

    promised_action_max_iteration: int = 3
    too_short_chars: int = 100
    too_short_max_iteration: int = 2
    asked_max_iteration: int = 2
    wrote_but_didnt_act_iteration: int = 1
    wrote_but_didnt_act_chars: int = 300


DEFAULT_NUDGE_RULES = NudgeRules()

_APOSTROPHE = "['’]"
_PROMISED = re.compile(
    rf"\b(?:I{_APOSTROPHE}ll|I will|I{_APOSTROPHE}m going to|I am going to|let me (?!know)"
    rf"|let{_APOSTROPHE}s (?:start|begin|look|check)|working on it|I{_APOSTROPHE}m on it)\b",
    re.IGNORECASE,
)
_ASKED = re.compile(
    r"\b(?:would you like me to|shall I|should I|do you want me to|want me to"
    r"|may I|can I proceed|let me know if you(?:'d| would)? (?:like|want))\b",
    re.IGNORECASE,
)
_SENTENCE_END = (".", "!", "?")

NUDGE_MESSAGES: dict[NudgeReason, str] = {
    NudgeReason.PROMISED_ACTION: (
        "You said what you are going to do, but you did not call a tool. Do it now: call "
        "the tool you need instead of describing the next step."
    ),
    NudgeReason.TOO_SHORT: (
        "Your reply is too short to complete the task and you did not use a tool. Use your "
        "tools to carry out the task now."
    ),
    NudgeReason.ASKED_INSTEAD_OF_ACTING: (
        "Do not ask for confirmation: the task is already assigned to you. Call the tools "
        "you need and do it now."
    ),
    NudgeReason.WROTE_BUT_DIDNT_ACT: (
        "You wrote a long answer but took no action. If the task needs files read or "
        "changed or commands run, call the tools to do it now instead of describing it."
    ),
}

# deliberately free of the markers themselves, so the nudge never reads as fake output
HALLUCINATION_NUDGE = (
    "You wrote tool output yourself. Tool results only come from real tool calls: never "
    "write a tool result or a tool output block in your reply. Call the tool properly and "
    "wait for its result."
)

#: markers of tool output the model made up (the seed's «…» and <<…>> spellings)
HALLUCINATION_MARKERS: tuple[str, ...] = (
    "[Tool Result]",
    "«tool_output»",
    "«/tool_output»",
    "<<tool_output>>",
    "<</tool_output>>",
)


def detect_nudge_reason(
    text: str,
    iteration: int,
    tools_used: bool,
    rules: NudgeRules = DEFAULT_NUDGE_RULES,
) -> NudgeReason | None:
    """Why a text-only reply on ``iteration`` (1-based) should be nudged, if at all.

    Only replies of a turn in which no tool has run yet are nudged. Checked in the
    order promised action, too short, asked instead of acting, wrote but didn't act.
    """
    if tools_used:
        return None
    stripped = text.strip()
    if iteration <= rules.promised_action_max_iteration and _PROMISED.search(stripped):
        return NudgeReason.PROMISED_ACTION
    if (
        iteration <= rules.too_short_max_iteration
        and len(stripped) < rules.too_short_chars
        and not stripped.endswith(_SENTENCE_END)
    ):
        return NudgeReason.TOO_SHORT
    if iteration <= rules.asked_max_iteration and _ASKED.search(stripped):
        return NudgeReason.ASKED_INSTEAD_OF_ACTING
    if (
        iteration == rules.wrote_but_didnt_act_iteration
        and len(stripped) > rules.wrote_but_didnt_act_chars
    ):
        return NudgeReason.WROTE_BUT_DIDNT_ACT
    return None


def nudge_message(reason: NudgeReason) -> str:
    """The user message injected for ``reason``."""
    return NUDGE_MESSAGES[reason]


def detect_hallucinated_tool_output(text: str) -> bool:
    """Whether ``text`` contains made-up tool output markers."""
    return any(marker in text for marker in HALLUCINATION_MARKERS)


def strip_hallucination(text: str) -> str:
    """``text`` cut before its first hallucination marker, trailing space removed.

    Everything after the first fake result is reasoning built on that fiction, so
    none of it is kept.
    """
    positions = [text.find(marker) for marker in HALLUCINATION_MARKERS]
    found = [position for position in positions if position >= 0]
    if not found:
        return text
    return text[: min(found)].rstrip()
