"""The tolerant parser of text-format tool calls (pure functions).

Accepts every form the original's parser (``extractToolCallsFromContent``) accepts, and
ranks them in its precedence:

1. ``<|python_tag|>name(key="value")`` (or ``name({json})``) — Llama 3.1;
2. ``name({json})`` anywhere in the reply;
3. ``<tool_call>…</tool_call>`` tags (closed or not) — Hermes/Qwen;
4. ReAct ``Action: name`` / ``Action Input: {json}`` (plain input → ``{"input": …}``);
5. a JSON array or object of ``{"name", "arguments"}`` (bare, in a code fence, or embedded
   in prose; also ``parameters``/``args``/``input`` and OpenAI's ``{"function": {...}}``);
6. a tool name on one line and its JSON arguments on the next;
7. ``name(key="value", …)`` — Python keyword arguments without the tag.

A model often writes one call in several of these forms at once; like the original, only
the calls of the highest-ranked form that holds a well-formed call are run, so such a
call runs once. The text of every form is stripped from the reply. Call forms
(``name(...)``, a name line) and name-only objects count only for offered tools, so code
in prose (``json.dumps({...})``) is never a call. Malformed arguments keep the call with
``arguments_error`` set. Public entry point:
:func:`corvid_actors.providers.text_tools.parse_tool_calls`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from corvid_actors.core.jsontypes import WireJson
from corvid_actors.core.vocabulary import ToolSpec
from corvid_actors.providers._text_tool_kwargs import closing_paren, parse_kwargs
from corvid_actors.providers._text_tool_repair import (
    is_offered,
    repair_arguments,
    repair_tool_name,
    specs_by_name,
)
from corvid_actors.providers.base import ToolCall

#: Keys under which models put a call's arguments.
_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)```", re.DOTALL)
_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL | re.IGNORECASE)
_CALL_SYNTAX = re.compile(r"(?<![\w.])([A-Za-z_][\w.-]*)\s*\(\s*(?=\{)")
_JSON_START = re.compile(r"\[\s*\{|\{\s*\"")
_NAME_FIELD = re.compile(r'"(?:name|tool|function)"\s*:\s*"([^"]+)"')
_OPENING = re.compile(r"[\[\s{]*")
_PYTHON_TAG = "<|python_tag|>"
_ANY_CALL = re.compile(r"(?<![\w.])([A-Za-z_][\w.-]*)\s*\(")
_REACT = re.compile(
    r"Action\s*:\s*(\S+)[ \t]*\n\s*Action\s*Input\s*:[ \t]*(.*?)"
    r"(?=\n\s*(?:Action\s*:|Thought\s*:|Observation\s*:)|\Z)",
    re.DOTALL,
)
_FENCE_MARK = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n?|\n?```\s*$")

# The original's precedence of call forms (lower runs first; see the module docstring).
RANK_PYTHON_TAG = 1
RANK_CALL_JSON = 2
RANK_TAG = 3
RANK_REACT = 4
RANK_JSON = 5
RANK_NAME_LINE = 6
RANK_KWARGS = 7


#: a call as found in the text: (name, its arguments as written, why they are unusable)
_RawCall = tuple[str, WireJson, str | None]


class _Found:
    """A call found in the text: where it was, what it said (before repair), its form."""

    def __init__(self, start: int, end: int, calls: list[_RawCall],
                 rank: int = RANK_JSON) -> None:
        self.start, self.end, self.calls, self.rank = start, end, calls, rank

    @property
    def well_formed(self) -> bool:
        return any(error is None for _, _, error in self.calls)


def _call_from_object(obj: WireJson, tool_names: Sequence[str]) -> _RawCall | None:
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
    value: WireJson, tool_names: Sequence[str]
) -> list[_RawCall] | None:
    items = value if isinstance(value, list) else [value]
    calls = [_call_from_object(item, tool_names) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _decode_at(text: str, pos: int) -> tuple[WireJson, int] | None:
    try:
        return json.JSONDecoder().raw_decode(text, pos)
    except json.JSONDecodeError:
        return None


def _broken_call(segment: str) -> list[_RawCall] | None:
    """A segment that is clearly meant as a call but is not valid JSON."""
    match = _NAME_FIELD.search(segment)
    if match is None or not any(f'"{k}"' in segment for k in _ARGUMENT_KEYS):
        return None
    return [(match.group(1), None, "arguments are not valid JSON: " + segment.strip()[:200])]


def _parse_segment(
    segment: str, tool_names: Sequence[str], *, explicit: bool, json_rank: int = RANK_JSON
) -> tuple[list[_RawCall], int] | None:
    """Calls in a fenced block or tag body and their form's rank: JSON (``json_rank``),
    ``name({json})``, ``name(key=value)``, or a broken attempt.

    ``explicit`` (a ``<tool_call>`` tag) accepts a call form for any name; in a code
    fence it must name an offered tool, or ordinary code would become a call.
    """
    stripped = segment.strip()
    if stripped.startswith(("{", "[")):
        decoded = _decode_at(stripped, 0)
        if decoded is not None and not stripped[decoded[1] :].strip():
            calls = _calls_from_json(decoded[0], tool_names)
            return (calls, json_rank) if calls else None
        broken = _broken_call(stripped)
        return (broken, json_rank) if broken else None
    match = _CALL_SYNTAX.match(stripped)
    if match is not None and (explicit or is_offered(match.group(1), tool_names)):
        found = _call_syntax_at(stripped, match)
        return (found.calls, found.rank) if found is not None else None
    match = _ANY_CALL.match(stripped)
    if match is not None and (explicit or is_offered(match.group(1), tool_names)):
        found = _kwargs_call_at(stripped, match)
        return (found.calls, found.rank) if found is not None else None
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
    """``name({json})`` at ``match``."""
    brace = match.end()
    decoded = _decode_at(text, brace)
    if decoded is not None:
        rest = re.match(r"\s*\)", text[decoded[1] :])
        if rest is not None:
            return _Found(
                match.start(), decoded[1] + rest.end(), [(match.group(1), decoded[0], None)],
                RANK_CALL_JSON,
            )
    close = re.compile(r"\}\s*\)").search(text, brace)
    if close is None:
        return None
    raw = text[brace : close.start() + 1]
    return _Found(
        match.start(),
        close.end(),
        [(match.group(1), None, "arguments are not valid JSON: " + raw[:200])],
        RANK_CALL_JSON,
    )


def _kwargs_call_at(text: str, match: re.Match[str], *, allow_empty: bool = False) -> _Found | None:
    """``name(key="value", …)`` at ``match`` (an ``_ANY_CALL`` match); ``name()`` only
    when ``allow_empty`` (after ``<|python_tag|>``, as the original)."""
    close = closing_paren(text, match.end() - 1)
    if close is None:
        return None
    inner = text[match.end() : close]
    if inner.lstrip().startswith("{"):
        return None  # name({json}) is the other form
    arguments = parse_kwargs(inner)
    if arguments is None or (not arguments and not allow_empty):
        return None
    return _Found(match.start(), close + 1, [(match.group(1), arguments, None)], RANK_KWARGS)


def _react_calls(text: str, tool_names: Sequence[str]) -> list[_Found]:
    """ReAct ``Action: name`` + ``Action Input: …`` blocks naming an offered tool."""
    found: list[_Found] = []
    for match in _REACT.finditer(text):
        name, raw = match.group(1).strip(), match.group(2)
        stripped = _FENCE_MARK.sub("", raw.strip()).strip()
        end = match.end()
        decoded = _decode_at(stripped, 0) if stripped.startswith("{") else None
        if decoded is not None and isinstance(decoded[0], dict):
            arguments: WireJson = decoded[0]
            tail = stripped[decoded[1] :].strip()
            if tail and not tail.startswith("```"):
                # prose after the JSON is the model talking, not part of the input
                end = match.start(2) + raw.find(tail) if raw.find(tail) >= 0 else end
        else:
            arguments = {"input": stripped} if stripped else {}
        repaired = repair_tool_name(name, tool_names, arguments if isinstance(arguments, dict) else None)
        if repaired in tool_names:
            found.append(_Found(match.start(), end, [(name, arguments, None)], RANK_REACT))
    return found


def _name_line_calls(text: str, tool_names: Sequence[str]) -> list[_Found]:
    """An offered tool's name alone on a line with its JSON arguments on the next."""
    if not tool_names:
        return []
    names = "|".join(re.escape(n) for n in sorted(tool_names, key=len, reverse=True))
    found: list[_Found] = []
    for match in re.finditer(rf"(?<![\w.])({names})[ \t]*\n\s*(?=\{{)", text):
        decoded = _decode_at(text, match.end())
        if decoded is not None and isinstance(decoded[0], dict) and not _call_from_object(decoded[0], tool_names):
            found.append(_Found(match.start(), decoded[1], [(match.group(1), decoded[0], None)],
                                RANK_NAME_LINE))
    return found


def _find_calls(text: str, tool_names: Sequence[str], python_tag_at: int = -1) -> list[_Found]:
    """Every call in ``text``, in every form, without overlaps; ``python_tag_at`` is where
    a ``<|python_tag|>`` stood (the call forms after it rank first)."""
    found: list[_Found] = []
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in taken)

    def add(item: _Found) -> None:
        found.append(item)
        taken.append((item.start, item.end))

    for match in _TAG.finditer(text):
        parsed = _parse_segment(match.group(1), tool_names, explicit=True, json_rank=RANK_TAG)
        if parsed:
            add(_Found(match.start(), match.end(), *parsed))
    for match in _FENCE.finditer(text):
        if free(match.start(), match.end()):
            parsed = _parse_segment(match.group(2), tool_names, explicit=False)
            if parsed:
                add(_Found(match.start(), match.end(), *parsed))
    for item in _react_calls(text, tool_names):
        if free(item.start, item.end):
            add(item)
    for item in _name_line_calls(text, tool_names):
        if free(item.start, item.end):
            add(item)
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
        hit = _call_syntax_at(text, match)
        if hit is not None and free(hit.start, hit.end):
            add(hit)
    for match in _ANY_CALL.finditer(text):
        if not free(match.start(), match.end()) or not is_offered(match.group(1), tool_names):
            continue
        after_tag = 0 <= python_tag_at <= match.start()
        hit = _kwargs_call_at(text, match, allow_empty=after_tag)
        if hit is not None and free(hit.start, hit.end):
            add(hit)
    if python_tag_at >= 0:
        for item in found:
            if item.start >= python_tag_at and item.rank in (RANK_CALL_JSON, RANK_KWARGS):
                item.rank = RANK_PYTHON_TAG
    return sorted(found, key=lambda f: f.start)


def _winning_form(found: Sequence[_Found]) -> int | None:
    """The rank whose calls run: the best-ranked form holding a well-formed call (the
    original tries its patterns in order and stops at the first that yields calls);
    when every call is malformed, the best-ranked one, so the model hears what was wrong."""
    ranks = [f.rank for f in found if f.well_formed] or [f.rank for f in found]
    return min(ranks, default=None)


def _build_call(
    index: int,
    name: str,
    raw: WireJson,
    error: str | None,
    specs: Mapping[str, ToolSpec],
    names: Sequence[str],
) -> ToolCall:
    arguments: WireJson = raw
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
        args = _plain_input(args, spec.parameters)
        args = repair_arguments(args, spec.parameters)
    return ToolCall(id=f"call_{index}", name=repaired, arguments=args, arguments_error=error)


def _plain_input(arguments: dict[str, WireJson], schema: Mapping[str, WireJson] | None) -> dict[str, WireJson]:
    """A ReAct plain-text ``Action Input`` (``{"input": text}``) given to the tool's one
    parameter (its only required one, or its only one) when the tool has no ``input``."""
    if set(arguments) != {"input"} or not isinstance(arguments["input"], str):
        return arguments
    properties = (schema or {}).get("properties") or {}
    if not isinstance(properties, Mapping) or "input" in properties:
        return arguments
    required = [r for r in (schema or {}).get("required") or () if r in properties]
    candidates = required if len(required) == 1 else list(properties)
    return {candidates[0]: arguments["input"]} if len(candidates) == 1 else arguments


def parse_tool_calls(
    text: str, tools: Sequence[ToolSpec] | Sequence[str]
) -> tuple[list[ToolCall], str]:
    """Find tool calls in a model reply; returns ``(calls, text without the calls)``.

    ``tools`` are the offered tools (specs enable argument-alias repair; bare names only
    name repair). Only the calls of the best-ranked form run (see the module docstring);
    they get ids ``call_0``, ``call_1``, … in order of appearance. A call
    whose arguments are not a JSON object is kept with ``arguments={}`` and
    ``arguments_error`` set, so the loop can tell the model what was wrong.
    """
    specs, names = specs_by_name(tools)
    tag_at = text.find(_PYTHON_TAG)
    cleaned = text.replace(_PYTHON_TAG, "")
    found = _find_calls(cleaned, names, tag_at)
    winner = _winning_form(found)
    calls: list[ToolCall] = []
    for item in found:
        if item.rank != winner:
            continue
        for name, raw, error in item.calls:
            calls.append(_build_call(len(calls), name, raw, error, specs, names))
    remaining, cursor = [], 0
    for item in found:
        remaining.append(cleaned[cursor : item.start])
        cursor = item.end
    remaining.append(cleaned[cursor:])
    rest = re.sub(r"\n{3,}", "\n\n", "".join(remaining)).strip()
    return calls, rest
