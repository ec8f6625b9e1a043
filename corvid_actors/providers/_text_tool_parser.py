"""The tolerant parser of text-format tool calls (pure functions).

Accepts a JSON array or object of ``{"name", "arguments"}`` (bare, in a code fence, or
embedded in prose; also ``parameters``/``args``/``input`` and OpenAI's ``{"function":
{...}}``), ``<tool_call>…</tool_call>`` tags (closed or not), and ``name({json})``
(optionally after ``<|python_tag|>``). ``name({json})`` and name-only objects count only
for offered tools, so code in prose (``json.dumps({...})``) is never a call. Malformed
arguments keep the call with ``arguments_error`` set. Public entry point:
:func:`corvid_actors.providers.text_tools.parse_tool_calls`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from corvid_actors.providers._text_tool_repair import (
    is_offered,
    repair_arguments,
    repair_tool_name,
    specs_by_name,
)
from corvid_actors.providers.base import ToolCall, ToolSpec

#: Keys under which models put a call's arguments.
_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)```", re.DOTALL)
_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL | re.IGNORECASE)
_CALL_SYNTAX = re.compile(r"(?<![\w.])([A-Za-z_][\w.-]*)\s*\(\s*(?=\{)")
_JSON_START = re.compile(r"\[\s*\{|\{\s*\"")
_NAME_FIELD = re.compile(r'"(?:name|tool|function)"\s*:\s*"([^"]+)"')
_OPENING = re.compile(r"[\[\s{]*")
_PYTHON_TAG = "<|python_tag|>"


class _Found:
    """A call found in the text: where it was and what it said (before repair)."""

    def __init__(self, start: int, end: int, calls: list[tuple[str, Any, str | None]]) -> None:
        self.start, self.end, self.calls = start, end, calls


def _call_from_object(obj: Any, tool_names: Sequence[str]) -> tuple[str, Any, str | None] | None:
    """``{name, arguments}`` (or OpenAI's ``{function: {...}}``) → (name, raw args, error)."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name") or obj.get("tool")
    if not isinstance(name, str) or not name.strip():
        return None
    key = next((k for k in _ARGUMENT_KEYS if k in obj), None)
    if key is None:
        # {"name": "read_file"} alone is a call without arguments; {"name": "Ann"} is data
        return (
            (name.strip(), {}, None)
            if len(obj) == 1 and is_offered(name.strip(), tool_names)
            else None
        )
    return name.strip(), obj[key], None


def _calls_from_json(
    value: Any, tool_names: Sequence[str]
) -> list[tuple[str, Any, str | None]] | None:
    items = value if isinstance(value, list) else [value]
    calls = [_call_from_object(item, tool_names) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _decode_at(text: str, pos: int) -> tuple[Any, int] | None:
    try:
        return json.JSONDecoder().raw_decode(text, pos)
    except json.JSONDecodeError:
        return None


def _broken_call(segment: str) -> list[tuple[str, Any, str | None]] | None:
    """A segment that is clearly meant as a call but is not valid JSON."""
    match = _NAME_FIELD.search(segment)
    if match is None or not any(f'"{k}"' in segment for k in _ARGUMENT_KEYS):
        return None
    return [(match.group(1), None, "arguments are not valid JSON: " + segment.strip()[:200])]


def _parse_segment(
    segment: str, tool_names: Sequence[str], *, explicit: bool
) -> list[tuple[str, Any, str | None]] | None:
    """Calls in a fenced block or tag body: JSON, ``name({json})``, or a broken attempt.

    ``explicit`` (a ``<tool_call>`` tag) accepts ``name({json})`` for any name; in a
    code fence it must name an offered tool, or ordinary code would become a call.
    """
    stripped = segment.strip()
    if stripped.startswith(("{", "[")):
        decoded = _decode_at(stripped, 0)
        if decoded is not None and not stripped[decoded[1] :].strip():
            return _calls_from_json(decoded[0], tool_names)
        return _broken_call(stripped)
    match = _CALL_SYNTAX.match(stripped)
    if match is not None and (explicit or is_offered(match.group(1), tool_names)):
        found = _call_syntax_at(stripped, match)
        return found.calls if found is not None else None
    return None


def _broken_bare_call(text: str, start: int, tool_names: Sequence[str]) -> _Found | None:
    """Invalid JSON in prose that starts like a call to an offered tool.

    The call's extent is unknown, so it runs to the end of the paragraph.
    """
    end = text.find("\n\n", start)
    end = len(text) if end < 0 else end
    opening = _OPENING.match(text, start)
    head = _NAME_FIELD.match(text, opening.end() if opening else start)
    if head is None or not is_offered(head.group(1), tool_names):
        return None
    calls = _broken_call(text[start:end])
    return _Found(start, end, calls) if calls else None


def _call_syntax_at(text: str, match: re.Match[str]) -> _Found | None:
    brace = match.end()
    decoded = _decode_at(text, brace)
    if decoded is not None:
        rest = re.match(r"\s*\)", text[decoded[1] :])
        if rest is not None:
            return _Found(
                match.start(), decoded[1] + rest.end(), [(match.group(1), decoded[0], None)]
            )
    close = re.compile(r"\}\s*\)").search(text, brace)
    if close is None:
        return None
    raw = text[brace : close.start() + 1]
    return _Found(
        match.start(),
        close.end(),
        [(match.group(1), None, "arguments are not valid JSON: " + raw[:200])],
    )


def _find_calls(text: str, tool_names: Sequence[str]) -> list[_Found]:
    found: list[_Found] = []
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in taken)

    def add(item: _Found) -> None:
        found.append(item)
        taken.append((item.start, item.end))

    for match in _TAG.finditer(text):
        calls = _parse_segment(match.group(1), tool_names, explicit=True)
        if calls:
            add(_Found(match.start(), match.end(), calls))
    for match in _FENCE.finditer(text):
        if free(match.start(), match.end()):
            calls = _parse_segment(match.group(2), tool_names, explicit=False)
            if calls:
                add(_Found(match.start(), match.end(), calls))
    for match in _JSON_START.finditer(text):
        if not free(match.start(), match.start() + 1):
            continue
        decoded = _decode_at(text, match.start())
        if decoded is None:
            broken = _broken_bare_call(text, match.start(), tool_names)
            if broken is not None and free(broken.start, broken.end):
                add(broken)
            continue
        calls = _calls_from_json(decoded[0], tool_names)
        if calls and free(match.start(), decoded[1]):
            add(_Found(match.start(), decoded[1], calls))
    for match in _CALL_SYNTAX.finditer(text):
        # name({json}) only for names that are (almost exactly) offered tools: code in
        # prose such as json.dumps({...}) must not become a call
        if not free(match.start(), match.end()):
            continue
        if not is_offered(match.group(1), tool_names):
            continue
        item = _call_syntax_at(text, match)
        if item is not None and free(item.start, item.end):
            add(item)
    return sorted(found, key=lambda f: f.start)


def _build_call(
    index: int,
    name: str,
    raw: Any,
    error: str | None,
    specs: Mapping[str, ToolSpec],
    names: Sequence[str],
) -> ToolCall:
    arguments: Any = raw
    if error is None and isinstance(raw, str):
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            error = f"arguments are not valid JSON ({exc.msg}): {raw[:200]}"
    if error is None and arguments is None:
        arguments = {}
    if error is None and not isinstance(arguments, dict):
        error = f"arguments must be a JSON object, got {type(arguments).__name__}"
    args = arguments if error is None else {}
    repaired = repair_tool_name(name, names, args)
    spec = specs.get(repaired)
    if spec is not None:
        args = repair_arguments(args, spec.parameters)
    return ToolCall(id=f"call_{index}", name=repaired, arguments=args, arguments_error=error)


def parse_tool_calls(
    text: str, tools: Sequence[ToolSpec] | Sequence[str]
) -> tuple[list[ToolCall], str]:
    """Find tool calls in a model reply; returns ``(calls, text without the calls)``.

    ``tools`` are the offered tools (specs enable argument-alias repair; bare names only
    name repair). Calls get ids ``call_0``, ``call_1``, … in order of appearance. A call
    whose arguments are not a JSON object is kept with ``arguments={}`` and
    ``arguments_error`` set, so the loop can tell the model what was wrong.
    """
    specs, names = specs_by_name(tools)
    cleaned = text.replace(_PYTHON_TAG, "")
    found = _find_calls(cleaned, names)
    calls: list[ToolCall] = []
    for item in found:
        for name, raw, error in item.calls:
            calls.append(_build_call(len(calls), name, raw, error, specs, names))
    remaining, cursor = [], 0
    for item in found:
        remaining.append(cleaned[cursor : item.start])
        cursor = item.end
    remaining.append(cleaned[cursor:])
    rest = re.sub(r"\n{3,}", "\n\n", "".join(remaining)).strip()
    return calls, rest
