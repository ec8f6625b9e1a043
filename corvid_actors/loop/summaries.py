"""Plain-text summaries of a conversation, made without a model call: the one-line
stand-ins for dropped or cut tool results, and the ``[Context Summary]`` the emergency
trim and a resume put in place of the history (see :mod:`.trimming` for when each is
used). The texts are the original's."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from corvid_actors.providers.base import ChatMessage

CONTEXT_SUMMARY_HEADER = "[Context Summary]"
#: first line of the user message the aggressive tier puts where the discarded messages were
TRIM_SUMMARY_HEADER = "[Earlier messages trimmed, one line each]"
#: how a window trim's line for a dropped tool result starts (the whole stand-in is such lines)
PREVIOUS_RESULT_PREFIX = "[Previous tool result: "
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
#: a sentence stating a decision: found sentence by sentence (one ``[^.!?\n]*…\b(?:…)``
#: pattern over the whole text retried its scan from every position, quadratic in a
#: reply without full stops: 7 s of CPU, the GIL held, for 20 KB of streamed tokens)
_SENTENCE = re.compile(r"[^.!?\n]*[.!?]?")
_DECISION_WORDS = re.compile(
    r"\b(?:I decided|decided to|I will|I'll|going to|the fix is|root cause|instead of|chose to|the plan is)\b",
    re.IGNORECASE,
)


def _decision_sentences(text: str) -> list[str]:
    """Each sentence (up to ``.``, ``!``, ``?`` or a line end, its mark kept) that states a
    decision, in order; linear in ``text``."""
    return [m.group(0) for m in _SENTENCE.finditer(text) if m.group(0) and _DECISION_WORDS.search(m.group(0))]


_CONFIG_VALUE = re.compile(r"\b[A-Z][A-Z0-9_]{2,}=[^\s'\"`,;]+")


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)] + "…"


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


_ERROR_WORD = re.compile(r"error|fail", re.IGNORECASE)


def flat_head(content: str, chars: int) -> str:
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
    parts.append(flat_head(content, preview_chars))
    return "\n".join(parts)


def previous_result_line(content: str, chars: int) -> str:
    """The original's line for a tool result a window trim dropped."""
    more = "..." if len(content) > chars else ""
    return f"{PREVIOUS_RESULT_PREFIX}{flat_head(content, chars)}{more} ({content.count(chr(10)) + 1} lines)]"


def is_trim_summary(message: ChatMessage) -> bool:
    """Whether ``message`` is a trim's stand-in: the aggressive tier's (a header line) or a
    window's (nothing but ``[Previous tool result: …]`` lines)."""
    if message.role != "user" or not message.content:
        return False
    if message.content.startswith(TRIM_SUMMARY_HEADER):
        return True
    return all(line.startswith(PREVIOUS_RESULT_PREFIX) for line in message.content.splitlines())


def short_result_line(content: str, chars: int) -> str:
    """The original's line for a tool result the aggressive tier dropped."""
    return f"[Tool: {flat_head(content, chars)}{'...' if len(content) > chars else ''}]"


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
    decisions = _unique([_one_line(d, limits.decision_chars) for d in _decision_sentences(texts)])
    errors = [
        f"- {m.tool_name or 'tool'}: {_one_line(m.content, limits.error_chars)}"
        for m in messages
        if m.role == "tool" and m.is_error
    ]
    configs = _unique(_CONFIG_VALUE.findall("\n".join(m.content for m in messages)))
    follow_ups = [
        f"- {_one_line(m.content, limits.follow_up_chars)}"
        for m in user[1:]
        if not m.content.startswith(CONTEXT_SUMMARY_HEADER) and not is_trim_summary(m)
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
