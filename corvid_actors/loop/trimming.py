"""Keeping the direct loop's conversation inside the model's context window.

Seed invariants: the history is trimmed when it has more than ``max_messages`` (40)
messages or its estimate exceeds ``trim_usage_threshold`` (70 %) of the budget; a trim
keeps the first message (the original prompt) and the most recent ones, and tool
results it discards become one-line summaries instead of vanishing.

The tiers (usage = estimated system + messages tokens / budget), cheapest first:

=========  ==================================================================
≥ 60 %     proactive: large old tool results the model has already answered
           become short summaries
≥ 70 %     compress tool results older than the last 5 messages to 200 chars;
           still ≥ 70 % (or > 40 messages) → window: first message + summary
           lines + the most recent messages
≥ 88 %     aggressive: first message + summary lines + the last 8, older tool
           results in them cut to 80 chars
≥ 93 %     emergency: a plain-text conversation summary + the last 4
=========  ==================================================================

The texts that stand in for cut or dropped tool results are the original's: a window
trim puts one user message of ``[Previous tool result: <200 chars>... (N lines)]`` lines
in place of the dropped messages, one line per dropped result and nothing else (seed
invariant 12); the aggressive tier lists every dropped message under a header line,
results as ``[Tool: <80 chars>...]``; compression leaves
``<head>... [compressed, was N chars]``; the loop's stale-result pass leaves
``<head>... [truncated, was N chars]``; the proactive digest starts ``[Summarized tool
result, was N chars, L lines]``.

A window or aggressive trim that leaves usage at or above ``trim_usage_threshold``
escalates to the next tier, so a trim always aims at the same headroom. No trim
ever separates an assistant message with tool calls from the tool messages answering
it: providers reject orphaned tool results (and calls without results). A kept tail
that would begin with a tool result is widened back to its call, so a trim may keep
a few more messages than asked.

The stand-in texts and the plain-text conversation summary are made in
:mod:`corvid_actors.loop.summaries`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from corvid_actors.loop.summaries import (
    PREVIOUS_RESULT_PREFIX,
    TRIM_SUMMARY_HEADER,
    flat_head,
    is_trim_summary,
    message_line,
    summarize_conversation,
    tool_result_digest,
)
from corvid_actors.loop.tokens import TokenSettings, estimate_messages_tokens
from corvid_actors.providers.base import ChatMessage


@dataclass(frozen=True)
class TrimTiers:
    """Thresholds and sizes of the trimming tiers above the seed's 70 % trigger."""

    proactive_threshold: float = 0.60
    proactive_min_chars: int = 500
    proactive_keep_last: int = 8
    proactive_preview_chars: int = 150
    compress_keep_last: int = 5
    compress_chars: int = 200
    #: a budget-driven window keeps this share of the messages, within [min, keep_recent]
    window_keep_share: float = 0.40
    window_min_keep: int = 6
    aggressive_threshold: float = 0.88
    aggressive_keep_last: int = 8
    aggressive_tool_chars: int = 80
    #: the newest messages whose tool results the aggressive tier leaves whole
    aggressive_fresh_messages: int = 3
    emergency_threshold: float = 0.93
    emergency_keep_last: int = 4
    summary_line_chars: int = 80
    #: preview of a dropped tool result in a window trim's "[Previous tool result: …]" line
    previous_result_chars: int = 200
    #: a chain of trims keeps at most this many summary lines (the newest)
    summary_max_lines: int = 40


class TrimConfig(Protocol):
    """The settings :func:`trim_messages` reads (DirectLoopSettings has them)."""

    @property
    def max_messages(self) -> int: ...

    @property
    def keep_recent(self) -> int: ...

    @property
    def trim_usage_threshold(self) -> float: ...

    @property
    def trim_tiers(self) -> TrimTiers: ...

    @property
    def token_settings(self) -> TokenSettings: ...


class TrimLevel(enum.StrEnum):
    """The strongest tier a trim applied."""

    NONE = "none"
    PROACTIVE = "proactive"
    COMPRESS = "compress"
    WINDOW = "window"
    AGGRESSIVE = "aggressive"
    EMERGENCY = "emergency"


@dataclass(frozen=True)
class TrimResult:
    """The trimmed conversation, whether anything changed, and the tier used."""

    messages: tuple[ChatMessage, ...]
    trimmed: bool
    level: TrimLevel
    estimated_tokens: int = 0


# --- tool-call groups -----------------------------------------------------------------


def _group_end(messages: Sequence[ChatMessage], index: int) -> int:
    """Index just past the message at ``index`` and the tool results that answer it."""
    end = index + 1
    if messages[index].role == "assistant" and messages[index].tool_calls:
        while end < len(messages) and messages[end].role == "tool":
            end += 1
    return end


def _tail_start(messages: Sequence[ChatMessage], keep: int) -> int:
    """Where the newest ``keep`` messages begin, moved back so no tool result is orphaned."""
    start = max(0, len(messages) - keep)
    while start > 0 and messages[start].role == "tool":
        start -= 1
    return start


# --- building blocks ------------------------------------------------------------------


def compress_tool_results(
    messages: Sequence[ChatMessage], keep_last: int, max_chars: int
) -> list[ChatMessage]:
    """Tool results older than the last ``keep_last`` messages cut to ``max_chars``
    (the original's ``compressToolResults``: ``<head on one line>... [compressed, was N chars]``)."""
    return _cut_old_results(messages, keep_last, max_chars, "compressed")


_CUT_MARKER = re.compile(r"\.\.\. \[(?:truncated|compressed), was \d+ chars\]\Z")


def truncate_old_tool_results(
    messages: Sequence[ChatMessage], keep_last: int, max_chars: int
) -> list[ChatMessage]:
    """The direct loop's stale-result pass (the original's ``truncateOldToolResults``):
    ``<head>... [truncated, was N chars]``."""
    return _cut_old_results(messages, keep_last, max_chars, "truncated")


def _cut_old_results(
    messages: Sequence[ChatMessage], keep_last: int, max_chars: int, how: str
) -> list[ChatMessage]:
    cutoff = len(messages) - keep_last
    out: list[ChatMessage] = []
    for index, message in enumerate(messages):
        if index < cutoff and message.role == "tool" and len(message.content) > max_chars:
            done = _CUT_MARKER.search(message.content)
            if done is not None and done.start() <= max_chars:
                # cut by an earlier pass: cutting again would only lose the original size
                out.append(message)
                continue
            head = message.content[:max_chars]
            if how == "compressed":
                head = flat_head(message.content, max_chars)
            content = f"{head}... [{how}, was {len(message.content)} chars]"
            message = dataclasses.replace(message, content=content)
        out.append(message)
    return out


def _proactive(messages: Sequence[ChatMessage], tiers: TrimTiers) -> list[ChatMessage]:
    """Big old tool results already followed by an assistant reply → a short digest."""
    cutoff = len(messages) - tiers.proactive_keep_last
    last_assistant = max(
        (index for index, message in enumerate(messages) if message.role == "assistant"),
        default=-1,
    )
    out: list[ChatMessage] = []
    for index, message in enumerate(messages):
        if (
            index < cutoff
            and index < last_assistant  # the model has already seen and answered it
            and message.role == "tool"
            and len(message.content) > tiers.proactive_min_chars
        ):
            digest = tool_result_digest(message, tiers.proactive_preview_chars)
            message = dataclasses.replace(message, content=digest)
        out.append(message)
    return out


def _summary_lines(dropped: Sequence[ChatMessage], tiers: TrimTiers, result_chars: int | None) -> list[str]:
    """The stand-in lines for ``dropped``: with ``result_chars`` (a window) one
    ``[Previous tool result: …]`` line per tool result and nothing for other messages;
    without (the aggressive tier) one line per message."""
    lines: list[str] = []
    for message in dropped:
        if is_trim_summary(message):
            # an earlier trim's stand-in: carry its lines instead of summarising a summary
            carried = [line for line in message.content.splitlines() if line != TRIM_SUMMARY_HEADER]
            if result_chars is not None:  # a window keeps only the tool-result lines
                carried = [line for line in carried if line.startswith((PREVIOUS_RESULT_PREFIX, "[Tool: "))]
            lines.extend(carried)
        elif result_chars is None or message.role == "tool":
            lines.append(message_line(message, tiers.summary_line_chars, result_chars))
    return lines[-tiers.summary_max_lines :]


def _window(messages: Sequence[ChatMessage], keep: int, tiers: TrimTiers,
            result_chars: int | None = None) -> list[ChatMessage]:
    """First message (with its tool results) + a stand-in for the middle + the last ``keep``.

    With ``result_chars`` (a window trim, seed invariant 12) the stand-in is one
    ``[Previous tool result: …]`` line per dropped tool result and nothing else (no
    message at all when no tool result was dropped); without (the aggressive tier) it is
    :data:`TRIM_SUMMARY_HEADER` and a line per dropped message, results as ``[Tool: …]``."""
    if not messages:
        return []
    head_end = _group_end(messages, 0)
    start = _tail_start(messages, keep)
    if start <= head_end:
        return list(messages)
    lines = _summary_lines(messages[head_end:start], tiers, result_chars)
    if result_chars is None:
        lines = [TRIM_SUMMARY_HEADER, *lines]
    stand_in = [ChatMessage(role="user", content="\n".join(lines))] if lines else []
    return [*messages[:head_end], *stand_in, *messages[start:]]


def _aggressive(messages: Sequence[ChatMessage], tiers: TrimTiers) -> list[ChatMessage]:
    kept = _window(messages, tiers.aggressive_keep_last, tiers)
    return compress_tool_results(kept, tiers.aggressive_fresh_messages, tiers.aggressive_tool_chars)


def overflow_recovery(
    messages: Sequence[ChatMessage], keep_last: int = TrimTiers.emergency_keep_last
) -> list[ChatMessage]:
    """A conversation the provider rejected as too long → summary + the last ``keep_last``.

    The summary is a plain-text ``[Context Summary]`` user message (no model call). A
    conversation no longer than ``keep_last`` is returned unchanged: there is nothing
    to summarise.
    """
    start = _tail_start(messages, keep_last)
    if start == 0:
        return list(messages)
    summary = ChatMessage(role="user", content=summarize_conversation(messages))
    return [summary, *messages[start:]]


# --- the tiers ------------------------------------------------------------------------


def _window_keep(count: int, by_count: bool, by_budget: bool, settings: TrimConfig) -> int:
    tiers = settings.trim_tiers
    budget_keep = max(
        tiers.window_min_keep,
        min(settings.keep_recent, math.ceil(tiers.window_keep_share * count)),
    )
    if by_budget:
        return budget_keep
    return settings.keep_recent if by_count else count


def trim_messages(
    messages: Sequence[ChatMessage],
    system: str,
    budget_tokens: int,
    settings: TrimConfig,
) -> TrimResult:
    """The conversation trimmed to fit ``budget_tokens`` by the tiers of the module docstring.

    A count-only trim (more than ``max_messages``, usage fine) keeps ``keep_recent``
    messages; a budget-driven one keeps 40 % of them (at least 6, at most
    ``keep_recent``).
    """
    tiers = settings.trim_tiers

    def usage(current: Sequence[ChatMessage]) -> tuple[int, float]:
        tokens = estimate_messages_tokens(current, system, settings.token_settings)
        return tokens, (tokens / budget_tokens if budget_tokens > 0 else 0.0)

    current = list(messages)
    _, start_usage = usage(current)
    level = TrimLevel.NONE
    if start_usage >= tiers.emergency_threshold:
        current, level = overflow_recovery(current, tiers.emergency_keep_last), TrimLevel.EMERGENCY
    elif start_usage >= tiers.aggressive_threshold:
        current, level = _aggressive(current, tiers), TrimLevel.AGGRESSIVE
    else:
        if start_usage >= tiers.proactive_threshold:
            current, level = _proactive(current, tiers), TrimLevel.PROACTIVE
        if start_usage >= settings.trim_usage_threshold:
            current = compress_tool_results(current, tiers.compress_keep_last, tiers.compress_chars)
            level = TrimLevel.COMPRESS
        _, now = usage(current)
        by_count = len(current) > settings.max_messages
        by_budget = now >= settings.trim_usage_threshold
        if by_count or by_budget:
            keep = _window_keep(len(current), by_count, by_budget, settings)
            current, level = _window(current, keep, tiers, tiers.previous_result_chars), TrimLevel.WINDOW
    # escalation: a window or aggressive trim that left no headroom goes one tier further
    _, now = usage(current)
    if level is TrimLevel.WINDOW and now >= settings.trim_usage_threshold:
        current, level = _aggressive(current, tiers), TrimLevel.AGGRESSIVE
        _, now = usage(current)
    if level is TrimLevel.AGGRESSIVE and now >= settings.trim_usage_threshold:
        current, level = overflow_recovery(current, tiers.emergency_keep_last), TrimLevel.EMERGENCY
    tokens, _ = usage(current)
    trimmed = current != list(messages)
    return TrimResult(tuple(current), trimmed, level if trimmed else TrimLevel.NONE, tokens)
