"""Repair of near-miss tool calls: tool names and argument names (pure functions).

Small models misspell tool names (case, separators, the ``corvid_`` prefix, a shell
tool under another name) and use their own argument names (``file_path`` for
``path``). Repair maps them onto what was offered and never invents or overwrites.
Used by the text-tools parser and, for native calls, by the Ollama provider.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from corvid_actors.core.jsontypes import WireJson
from corvid_actors.core.vocabulary import ToolSpec
from corvid_actors.providers.base import ToolCall

#: A fuzzy (substring) name or argument match must be at least this long, so that "a"
#: or "get" never pick a tool (reference §6: "substring >= 4 chars").
MIN_FUZZY_MATCH_CHARS = 4
#: The prefix of the runtime's own tools, which models often add or leave out.
CORVID_PREFIX = "corvid_"
#: The tool that a call carrying a "command" argument most likely meant.
COMMAND_TOOL = "run_command"
#: Argument aliases models commonly use, by the canonical schema name they stand for.
ARGUMENT_ALIASES: Mapping[str, tuple[str, ...]] = {
    "path": (
        "file_path",
        "filepath",
        "filename",
        "file_name",
        "file",
        "path_name",
        "dir",
        "directory",
    ),
    "command": ("cmd", "command_line", "shell_command", "shell"),
    "content": ("contents", "file_content", "text", "data"),
    "pattern": ("regex", "query", "search", "search_pattern"),
}


def _squash(name: str) -> str:
    return re.sub(r"[-_\s.]", "", name.lower())


def repair_tool_name(
    name: str,
    tool_names: Sequence[str],
    arguments: Mapping[str, WireJson] | None = None,
    *,
    fuzzy: bool = True,
) -> str:
    """Map a near-miss tool name onto an offered one; unknown names are returned unchanged.

    Tries, in order: exact, case-insensitive, ``corvid_`` prefix added or removed,
    separators ignored; then (``fuzzy``) a ``command`` argument means ``run_command``,
    and a unique substring match of at least :data:`MIN_FUZZY_MATCH_CHARS` characters.
    """
    if name in tool_names or not tool_names:
        return name
    lowered = name.strip().lower()
    by_lower = {t.lower(): t for t in tool_names}
    candidates = [lowered, CORVID_PREFIX + lowered]
    if lowered.startswith(CORVID_PREFIX):
        candidates.append(lowered[len(CORVID_PREFIX) :])
    for candidate in candidates:
        if candidate in by_lower:
            return by_lower[candidate]
    by_squashed = {_squash(t): t for t in tool_names}
    for candidate in candidates:
        if _squash(candidate) in by_squashed:
            return by_squashed[_squash(candidate)]
    if not fuzzy:
        return name
    if arguments and "command" in arguments and COMMAND_TOOL in tool_names:
        return COMMAND_TOOL
    squashed = _squash(name)
    if len(squashed) >= MIN_FUZZY_MATCH_CHARS:
        hits = [
            t
            for t in tool_names
            if squashed in _squash(t)
            or (len(_squash(t)) >= MIN_FUZZY_MATCH_CHARS and _squash(t) in squashed)
        ]
        if len(hits) == 1:
            return hits[0]
    return name


def repair_arguments(
    arguments: Mapping[str, WireJson], schema: Mapping[str, WireJson] | None
) -> dict[str, WireJson]:
    """Rename argument aliases to the schema's names (``file_path`` → ``path``).

    Only keys the schema does not know are renamed, only onto schema properties the call
    did not set, and an existing key is never overwritten.
    """
    result = dict(arguments)
    properties = (schema or {}).get("properties") or {}
    if not isinstance(properties, Mapping) or not properties:
        return result
    for key in list(result):
        if key in properties:
            continue
        target = _alias_target(key, properties, result)
        if target is not None:
            result[target] = result.pop(key)
    return result


def _alias_target(
    key: str, properties: Mapping[str, WireJson], present: Mapping[str, WireJson]
) -> str | None:
    lowered = key.lower()
    free = [p for p in properties if p not in present]
    for canonical, aliases in ARGUMENT_ALIASES.items():
        if canonical in free and lowered in aliases:
            return canonical
    # substring match ("source_path" -> "path"), only when it is unambiguous
    hits = [p for p in free if len(p) >= MIN_FUZZY_MATCH_CHARS and (p in lowered or lowered in p)]
    return hits[0] if len(hits) == 1 else None


def is_offered(name: str, tool_names: Sequence[str]) -> bool:
    """Is ``name`` an offered tool up to case, separators and the corvid_ prefix?"""
    return repair_tool_name(name, tool_names, fuzzy=False) in tool_names


def specs_by_name(
    tools: Sequence[ToolSpec] | Sequence[str],
) -> tuple[dict[str, ToolSpec], list[str]]:
    """Offered tools as (specs by name, names); bare names have no spec."""
    specs = {t.name: t for t in tools if isinstance(t, ToolSpec)}
    names = [t.name if isinstance(t, ToolSpec) else t for t in tools]
    return specs, names


def repair_native_call(call: ToolCall, tools: Sequence[ToolSpec]) -> ToolCall:
    """Apply name and argument repair to a natively reported call."""
    specs, names = specs_by_name(tools)
    name = repair_tool_name(call.name, names, call.arguments)
    spec = specs.get(name)
    arguments = repair_arguments(call.arguments, spec.parameters) if spec else dict(call.arguments)
    return ToolCall(
        id=call.id, name=name, arguments=arguments, arguments_error=call.arguments_error
    )
