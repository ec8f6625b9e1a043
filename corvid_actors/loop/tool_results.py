"""Capping tool results so one output cannot flood the model's context.

Seed invariant: a single tool result gets at most 30 % of the context window, less
when the window is already filling up, and never less than 1,000 characters (a
floor, so the model always sees enough to act on). Sizes are in characters, converted
from tokens at a fixed chars-per-token ratio — the cap is a guard, not an accountant.

The arithmetic and the cut are the original's (``calculateMaxToolResultChars`` and the
direct process): ``⌊0.3 × window⌋ × 4`` and ``⌊0.6 × remaining⌋ × 4`` characters; text
keeps its head, then ``"\n\n[... truncated, N chars omitted]"`` with N = length − cap;
JSON keeps ⌊70 %⌋ head and ⌊20 %⌋ tail of the cap around
``"\n\n[... M chars omitted ...]\n\n"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class ToolResultCapConfig(Protocol):
    """The settings :func:`max_tool_result_chars` reads (DirectLoopSettings has them)."""

    @property
    def tool_result_share(self) -> float: ...

    @property
    def tool_result_pressure_share(self) -> float: ...

    @property
    def tool_result_min_chars(self) -> int: ...

    @property
    def cap_chars_per_token(self) -> float: ...


@dataclass(frozen=True)
class TruncationShape:
    """How an oversized result is cut.

    JSON keeps its head and its tail (closing brackets, trailing fields often say how
    the structure ends); other text keeps its head.
    """

    json_head_share: float = 0.70
    json_tail_share: float = 0.20


DEFAULT_TRUNCATION_SHAPE = TruncationShape()


def max_tool_result_chars(
    context_window: int, used_tokens: int, settings: ToolResultCapConfig
) -> int:
    """The largest tool result (in characters) the context can take right now.

    ``min(⌊share × window⌋, ⌊pressure_share × (window − used)⌋)`` tokens, in characters,
    floored at ``tool_result_min_chars`` (tokens are floored before the conversion, as
    the original does).
    """
    absolute = math.floor(context_window * settings.tool_result_share) * settings.cap_chars_per_token
    remaining = max(0, context_window - used_tokens)
    available = math.floor(remaining * settings.tool_result_pressure_share) * settings.cap_chars_per_token
    return max(settings.tool_result_min_chars, int(min(absolute, available)))


def looks_like_json(text: str) -> bool:
    """Whether ``text`` opens like a JSON object or array."""
    return text.lstrip()[:1] in ("{", "[")


def cap_tool_result(
    text: str, max_chars: int, shape: TruncationShape = DEFAULT_TRUNCATION_SHAPE
) -> str:
    """``text`` unchanged when it fits ``max_chars``; otherwise cut with a marker.

    JSON-looking text keeps 70 % head and 20 % tail around ``[... M chars omitted ...]``;
    other text keeps its head followed by ``[... truncated, N chars omitted]`` (the
    original's markers, joined by blank lines).
    """
    if len(text) <= max_chars:
        return text
    if looks_like_json(text):
        head = math.floor(max_chars * shape.json_head_share)
        tail = math.floor(max_chars * shape.json_tail_share)
        omitted = len(text) - head - tail
        tail_text = text[len(text) - tail :] if tail else ""
        return f"{text[:head]}\n\n[... {omitted} chars omitted ...]\n\n{tail_text}"
    omitted = len(text) - max_chars
    return f"{text[:max_chars]}\n\n[... truncated, {omitted} chars omitted]"
