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
trim lists each dropped result as ``[Previous tool result: <200 chars>... (N lines)]``
(``[Tool: <80 chars>...]`` in the aggressive tier); compression leaves
``<head>... [compressed, was N chars]``; the loop's stale-result pass leaves
``<head>... [truncated, was N chars]``; the proactive digest starts ``[Summarized tool
result, was N chars, L lines]``.

A window or aggressive trim that leaves usage at or above ``trim_usage_threshold``
escalates to the next tier, so a trim always aims at the same headroom. No trim
ever separates an assistant message with tool calls from the tool messages answering
it: providers reject orphaned tool results (and calls without results). A kept tail
that would begin with a tool result is widened back to its call, so a trim may keep
a few more messages than asked.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

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


# --- plain-text summaries (no model call) ----------------------------------------------

CONTEXT_SUMMARY_HEADER = "[Context Summary]"
#: first line of the user message a window trim puts where the discarded messages were
TRIM_SUMMARY_HEADER = "[Earlier messages trimmed, one line each]"
_ORIGINAL_REQUEST = "Original request: "


@dataclass(frozen=True)
class SummaryLimits:
    """How much of each section :func:`summarize_conversation` keeps."""

    request_chars: int = 500
    max_files: int = 20
    max_decisions: int = 12
    decision_chars: int = 160
    max_errors: int = 8
    error_chars: int = 150
    max_config_values: int = 12
    recent_responses: int = 3
    response_chars: int = 600
    max_follow_ups: int = 8
    follow_up_chars: int = 200
    digest_paths: int = 3


DEFAULT_SUMMARY_LIMITS = SummaryLimits()

_PATH = re.compile(
    r"(?<![\w/.-])(?:\.{1,2}/|/)?(?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.(?:py|pyi|ts|tsx|js|jsx|mjs"
    r"|json|md|txt|toml|ya?ml|cfg|ini|sh|rs|go|java|kt|c|h|cc|cpp|hpp|cs|rb|php|html|css"
    r"|scss|sql|lock|xml|csv)\b"
)
_PATH_KEYS = ("path", "file_path", "filename", "file", "target", "source", "destination")
_DECISION = re.compile(
    r"[^.!?\n]*\b(?:I decided|decided to|I will|I'll|going to|the fix is|root cause"
    r"|instead of|chose to|the plan is)\b[^.!?\n]*[.!?]?",
    re.IGNORECASE,
)
_CONFIG_VALUE = re.compile(r"\b[A-Z][A-Z0-9_]{2,}=[^\s'\"`,;]+")


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)] + "…"


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


_ERROR_WORD = re.compile(r"error|fail", re.IGNORECASE)


def _flat_head(content: str, chars: int) -> str:
    """The original's preview: the first ``chars`` characters, newlines as spaces, trimmed."""
    return content[:chars].replace("\n", " ").strip()


def tool_result_digest(message: ChatMessage, preview_chars: int) -> str:
    """A short stand-in for a tool result, in the original's shape: size and line count,
    the paths it names, whether it contained errors, and a preview."""
    content = message.content
    parts = [f"[Summarized tool result, was {len(content)} chars, {content.count(chr(10)) + 1} lines]"]
    paths = _unique(_PATH.findall(content))[: DEFAULT_SUMMARY_LIMITS.digest_paths]
    if paths:
        parts.append("Files: " + ", ".join(paths))
    if message.is_error or _ERROR_WORD.search(content):
        parts.append("(contained errors)")
    parts.append(_flat_head(content, preview_chars))
    return "\n".join(parts)


def previous_result_line(content: str, chars: int) -> str:
    """The original's line for a tool result a window trim dropped."""
    more = "..." if len(content) > chars else ""
    return f"[Previous tool result: {_flat_head(content, chars)}{more} ({content.count(chr(10)) + 1} lines)]"


def short_result_line(content: str, chars: int) -> str:
    """The original's line for a tool result the aggressive tier dropped."""
    return f"[Tool: {_flat_head(content, chars)}{'...' if len(content) > chars else ''}]"


def message_line(message: ChatMessage, chars: int, result_chars: int | None = None) -> str:
    """One line standing for a discarded message (a tool result: ``[Previous tool
    result: …]`` with ``result_chars`` of preview, or ``[Tool: …]`` without)."""
    if message.role == "tool":
        if result_chars is None:
            return short_result_line(message.content, chars)
        return previous_result_line(message.content, result_chars)
    if message.tool_calls:
        calls = ", ".join(call.name for call in message.tool_calls)
        text = _one_line(message.content, chars)
        return f"- assistant called {calls}" + (f": {text}" if text else "")
    return f"- {message.role}: {_one_line(message.content, chars)}"


def _original_request(messages: Sequence[ChatMessage], limit: int) -> str:
    first = next((m.content for m in messages if m.role == "user"), "")
    if first.startswith(CONTEXT_SUMMARY_HEADER):
        # an earlier recovery's summary: its original request is still the original
        for line in first.splitlines():
            if line.startswith(_ORIGINAL_REQUEST):
                return line[len(_ORIGINAL_REQUEST) :]
    return _one_line(first, limit)


def _files_touched(messages: Sequence[ChatMessage]) -> list[str]:
    found: list[str] = []
    for message in messages:
        for call in message.tool_calls:
            for key, value in call.arguments.items():
                if isinstance(value, str) and key in _PATH_KEYS:
                    found.append(value.strip())
                elif isinstance(value, str):
                    found.extend(_PATH.findall(value))
    return _unique(found)


def summarize_conversation(
    messages: Sequence[ChatMessage],
    project: str | None = None,
    limits: SummaryLimits = DEFAULT_SUMMARY_LIMITS,
) -> str:
    """A plain-text ``[Context Summary]`` of ``messages``, built without a model call.

    Sections: active project (when given), original request, files touched, key
    decisions, errors, configuration values (``NAME=value``), tool-call count,
    follow-up user messages and the last assistant responses. Empty sections are left
    out.
    """
    user = [m for m in messages if m.role == "user"]
    assistant = [m for m in messages if m.role == "assistant" and m.content.strip()]
    texts = " ".join(m.content for m in assistant)
    decisions = _unique([_one_line(d, limits.decision_chars) for d in _DECISION.findall(texts)])
    errors = [
        f"- {m.tool_name or 'tool'}: {_one_line(m.content, limits.error_chars)}"
        for m in messages
        if m.role == "tool" and m.is_error
    ]
    configs = _unique(_CONFIG_VALUE.findall("\n".join(m.content for m in messages)))
    follow_ups = [
        f"- {_one_line(m.content, limits.follow_up_chars)}"
        for m in user[1:]
        if not m.content.startswith((CONTEXT_SUMMARY_HEADER, TRIM_SUMMARY_HEADER))
    ]
    recent = [f"- {_one_line(m.content, limits.response_chars)}" for m in assistant]
    files = _files_touched(messages)
    lines = [CONTEXT_SUMMARY_HEADER]
    if project:
        lines.append(f"Active project: {project}")
    lines.append(_ORIGINAL_REQUEST + _original_request(messages, limits.request_chars))
    if files:
        lines.append("Files touched: " + ", ".join(files[: limits.max_files]))
    sections = (
        ("Key decisions:", [f"- {d}" for d in decisions[-limits.max_decisions :]]),
        ("Errors:", errors[-limits.max_errors :]),
        ("Configuration values:", [f"- {c}" for c in configs[: limits.max_config_values]]),
        ("Follow-up messages:", follow_ups[-limits.max_follow_ups :]),
        ("Recent assistant responses:", recent[-limits.recent_responses :]),
    )
    for title, items in sections:
        if items:
            lines.append(title)
            lines.extend(items)
    tool_calls = sum(len(m.tool_calls) for m in messages)
    lines.append(f"Tool calls made so far: {tool_calls}")
    return "\n".join(lines)


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
                head = _flat_head(message.content, max_chars)
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
    lines: list[str] = []
    for message in dropped:
        if message.role == "user" and message.content.startswith(TRIM_SUMMARY_HEADER):
            # an earlier trim's summary: carry its lines instead of summarising a summary
            lines.extend(message.content.splitlines()[1:])
        else:
            lines.append(message_line(message, tiers.summary_line_chars, result_chars))
    return lines[-tiers.summary_max_lines :]


def _window(messages: Sequence[ChatMessage], keep: int, tiers: TrimTiers,
            result_chars: int | None = None) -> list[ChatMessage]:
    """First message (with its tool results) + summary lines of the middle + the last ``keep``.

    Dropped tool results become ``[Previous tool result: …]`` lines with ``result_chars``
    of preview (``[Tool: …]`` lines when None, as the aggressive tier writes them)."""
    if not messages:
        return []
    head_end = _group_end(messages, 0)
    start = _tail_start(messages, keep)
    if start <= head_end:
        return list(messages)
    lines = _summary_lines(messages[head_end:start], tiers, result_chars)
    summary = ChatMessage(role="user", content="\n".join([TRIM_SUMMARY_HEADER, *lines]))
    return [*messages[:head_end], summary, *messages[start:]]


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
