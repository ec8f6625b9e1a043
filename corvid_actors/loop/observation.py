"""Observation caps (OpenAgent seed): how much of a tool's output the model is shown.

Every tool result passes through :func:`build_observation` before it enters the
conversation:

- an output over ``hard_limit_bytes`` (50 KiB) is not shown at all: the model gets a
  notice with its size and how to ask for less;
- otherwise at most ``max_lines`` (200) lines — the *last* lines for commands (where
  errors and summaries are), the first lines for other tools, and for JSON output (it
  opens with a whole JSON object or array) its head and its tail in the original's 70:20 shape, since
  neither end alone says what the structure is — and at most ``max_bytes`` (16 KiB),
  notice included. A command call may ask for another number
  of trailing lines with its ``tail_lines`` argument; the byte cap still holds.

Whenever something was cut, the notice says what (lines and bytes shown of the total)
and how to read more. The complete output never reaches the model; the loop keeps it
for the operator (a ``tool`` message in the store, see :func:`operator_record`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

#: ``PersistMessage.role`` under which a full tool output is kept for the operator
OPERATOR_OUTPUT_ROLE = "tool"


@dataclass(frozen=True)
class ObservationSettings:
    """Caps on what the model sees of one tool output (seed values as defaults)."""

    enabled: bool = True
    max_lines: int = 200
    max_bytes: int = 16 * 1024
    hard_limit_bytes: int = 50 * 1024
    #: the per-call argument that overrides ``max_lines`` (trailing lines)
    tail_lines_argument: str = "tail_lines"
    #: room kept inside ``max_bytes`` for the notice (every notice is shorter)
    notice_reserve_bytes: int = 600


@dataclass(frozen=True)
class Observation:
    """What the model is shown of one output, and how much of it that is."""

    text: str
    truncated: bool
    omitted: bool
    total_bytes: int
    total_lines: int
    shown_lines: int
    shown_bytes: int


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


def _cut_bytes(text: str, budget: int, *, from_end: bool) -> str:
    """At most ``budget`` UTF-8 bytes of ``text`` (its end or its start), on a line
    boundary when one is near, never inside a character."""
    data = text.encode("utf-8", "replace")
    if len(data) <= budget:
        return text
    part = data[len(data) - budget:] if from_end else data[:budget]
    cut = part.decode("utf-8", "ignore")
    if from_end and "\n" in cut[:-1]:
        cut = cut[cut.index("\n") + 1:]
    elif not from_end and "\n" in cut:
        cut = cut[: cut.rindex("\n") + 1]
    return cut


def parse_tail_lines(arguments: dict[str, Any], settings: ObservationSettings) -> int | None:
    """The call's positive ``tail_lines`` override, if it gave a usable one."""
    value = arguments.get(settings.tail_lines_argument)
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number > 0 else None


def build_observation(output: str, settings: ObservationSettings, *, command: bool = True,
                      tail_lines: int | None = None, max_bytes: int | None = None) -> Observation:
    """Cap ``output`` for the model (see the module docstring). ``command`` selects the
    tail (commands) or the head (other tools); ``tail_lines`` overrides the line cap;
    ``max_bytes`` lowers the byte cap for this output (the direct loop's share of the
    context window, so both caps are one cut whose notice states the output's own size)."""
    if max_bytes is not None and max_bytes < settings.max_bytes:
        settings = replace(settings, max_bytes=max(max_bytes, settings.notice_reserve_bytes + 1))
    text = output.encode("utf-8", "replace").decode("utf-8")
    total_bytes = _utf8_len(text)
    lines = text.splitlines(keepends=True)
    total_lines = len(lines)
    if not settings.enabled:
        return Observation(text, False, False, total_bytes, total_lines, total_lines, total_bytes)
    if total_bytes > settings.hard_limit_bytes:
        notice = _omitted_notice(total_bytes, total_lines, settings, command)
        return Observation(notice, True, True, total_bytes, total_lines, 0, 0)
    limit = tail_lines if tail_lines is not None else settings.max_lines
    if tail_lines is None and (total_lines > limit or total_bytes > settings.max_bytes) and _is_json(text):
        return _json_observation(lines, limit, total_bytes, settings)
    kept = lines[-limit:] if command else lines[:limit]
    shown = "".join(kept)
    if total_lines <= limit and total_bytes <= settings.max_bytes:
        return Observation(text, False, False, total_bytes, total_lines, total_lines, total_bytes)
    shown = _cut_bytes(shown, settings.max_bytes - settings.notice_reserve_bytes, from_end=command)
    shown_lines = len(shown.splitlines())
    shown_bytes = _utf8_len(shown)
    notice = _cut_notice(shown_lines, total_lines, shown_bytes, total_bytes, settings, command)
    body = f"{notice}\n{shown}" if command else f"{shown.rstrip(chr(10))}\n{notice}"
    return Observation(body, True, False, total_bytes, total_lines, shown_lines, shown_bytes)


#: how a cut JSON output is shared between its head and its tail (the original's 70:20)
JSON_HEAD_SHARE, JSON_TAIL_SHARE = 7, 2


def _is_json(text: str) -> bool:
    """Whether ``text`` opens with a whole JSON object or array (a log line such as
    ``[INFO] …`` or ``[2026-01-01 …]`` does not)."""
    stripped = text.lstrip()
    if stripped[:1] not in ("{", "["):
        return False
    try:
        json.JSONDecoder().raw_decode(stripped)
    except json.JSONDecodeError:
        return False
    return True


def _json_observation(lines: list[str], limit: int, total_bytes: int,
                      settings: ObservationSettings) -> Observation:
    """Head and tail of a JSON output with the notice between them."""
    total_lines = len(lines)
    shares = JSON_HEAD_SHARE + JSON_TAIL_SHARE
    head_lines = max(1, limit * JSON_HEAD_SHARE // shares)
    tail_lines = max(1, limit - head_lines)
    if head_lines + tail_lines >= total_lines:
        # only the byte cap bites: head and tail are cut from the whole text by bytes, so
        # the output's real end is kept even when it is one long line
        head_lines = tail_lines = total_lines
    budget = settings.max_bytes - settings.notice_reserve_bytes
    head = _cut_bytes("".join(lines[:head_lines]), budget * JSON_HEAD_SHARE // shares, from_end=False)
    tail = _cut_bytes("".join(lines[total_lines - tail_lines:]) if tail_lines else "",
                      budget * JSON_TAIL_SHARE // shares, from_end=True)
    shown_head, shown_tail = len(head.splitlines()), len(tail.splitlines())
    shown_bytes = _utf8_len(head) + _utf8_len(tail)
    notice = (f"[Output truncated: showing the first {shown_head} and the last {shown_tail} of "
              f"{total_lines} lines ({shown_bytes} of {total_bytes} bytes) of this JSON. The full "
              "output is kept for the operator, not shown to you. To read more, narrow it (jq, "
              "grep) or ask for less at a time.]")
    body = f"{head.rstrip(chr(10))}\n{notice}\n{tail}"
    return Observation(body, True, False, total_bytes, total_lines, shown_head + shown_tail, shown_bytes)


def _cut_notice(shown_lines: int, total_lines: int, shown_bytes: int, total_bytes: int,
                settings: ObservationSettings, command: bool) -> str:
    where = "last" if command else "first"
    head = (f"[Output truncated: showing the {where} {shown_lines} of {total_lines} lines "
            f"({shown_bytes} of {total_bytes} bytes). The full output is kept for the operator, "
            "not shown to you.")
    if command:
        how = (f" To read other parts, run the command again with {settings.tail_lines_argument}=N "
               "for the last N lines (at most "
               f"{settings.max_bytes} bytes are shown), or narrow it: grep, head -n, sed -n 'A,Bp'.]")
    else:
        how = " To read more, ask for less at a time (read_file with offset and limit, a narrower search).]"
    return head + how


def _omitted_notice(total_bytes: int, total_lines: int, settings: ObservationSettings,
                    command: bool) -> str:
    how = ("Run a command that prints less: filter it (grep, head -n, tail -n, sed -n 'A,Bp', "
           "wc -l), or write it to a file and read parts with read_file offset and limit."
           if command else
           "Ask for less at a time (read_file with offset and limit, a narrower search or path).")
    return (f"[Output omitted: {total_bytes} bytes in {total_lines} lines is over the "
            f"{settings.hard_limit_bytes}-byte limit, so none of it is shown. The full output is "
            f"kept for the operator. {how}]")


def operator_record(call_id: str, tool_name: str, output: str, is_error: bool) -> str:
    """The stored form of a complete tool output (JSON), kept when the model saw less.

    ``<`` is escaped: the store strips ``<conversation_history>`` blocks from what it
    keeps, and an output that prints that tag must not lose part of its record.
    """
    text = json.dumps({"call_id": call_id, "tool_name": tool_name, "is_error": is_error,
                       "bytes": _utf8_len(output), "output": output}, ensure_ascii=False)
    return text.replace("<", "\\u003c")


def parse_operator_record(content: str) -> dict[str, Any] | None:
    """A stored record back as a dict (None for a ``tool`` message of another shape)."""
    try:
        data = json.loads(content)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and "output" in data and "call_id" in data else None
