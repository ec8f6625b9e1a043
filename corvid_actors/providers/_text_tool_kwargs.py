"""Python-style call arguments in model text: ``read_file(path="a.txt", limit=20)``.

Llama-family models write tool calls as Python calls, after ``<|python_tag|>`` or bare in
their reply. These pure helpers find where such a call ends (quotes and nesting
respected) and turn its keyword arguments into a JSON-like dict, as the original's
``parsePythonArgs`` does: quoted strings, numbers, ``true``/``false``/``null`` (and Python's
``True``/``False``/``None``), lists and objects; anything else is kept as its text.
"""

from __future__ import annotations

import ast
import json
import re

from corvid_actors.core.jsontypes import JsonScalar, WireJson

#: the original's fallback for arguments Python cannot parse (e.g. a raw newline in quotes)
_KWARG = re.compile(
    r"""(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|(\[[^\]]*\]|\{[^}]*\}|[^,)]+))""",
    re.DOTALL,
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_JS_CONSTANTS: dict[str, JsonScalar] = {"true": True, "false": False, "null": None, "None": None,
                                 "True": True, "False": False}
_OPENERS, _CLOSERS = "([{", ")]}"


def closing_paren(text: str, open_pos: int) -> int | None:
    """Index of the ``)`` that closes the ``(`` at ``open_pos`` (quotes, brackets and
    backslash escapes inside strings respected), or None when the call never closes."""
    depth, quote, i = 0, "", open_pos
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 2
                continue
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
            if depth == 0:
                return i if char == ")" else None
        i += 1
    return None


def _value(node: ast.expr, source: str) -> WireJson:
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.Name) and node.id in _JS_CONSTANTS:
        return _JS_CONSTANTS[node.id]
    text = ast.get_source_segment(source, node) or ""
    try:  # JSON with true/false/null inside a list or object
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _fallback(args: str) -> dict[str, WireJson]:
    result: dict[str, WireJson] = {}
    for match in _KWARG.finditer(args):
        key, double, single, bare = match.groups()
        if double is not None or single is not None:
            raw = double if double is not None else single
            result[key] = raw.replace('\\"', '"').replace("\\'", "'")
            continue
        value = bare.strip()
        if value in _JS_CONSTANTS:
            result[key] = _JS_CONSTANTS[value]
        elif _NUMBER.fullmatch(value):
            result[key] = float(value) if "." in value else int(value)
        else:
            try:
                result[key] = json.loads(value)
            except json.JSONDecodeError:
                result[key] = value
    return result


def parse_kwargs(args: str) -> dict[str, WireJson] | None:
    """The keyword arguments of a Python-style call (the text between its parentheses).

    ``{}`` for no arguments; None when the text holds positional arguments only, since
    nothing says which parameter they are for.
    """
    if not args.strip():
        return {}
    source = f"f({args})"
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        return _fallback(args) or None
    if not isinstance(node, ast.Call) or any(kw.arg is None for kw in node.keywords):
        return _fallback(args) or None
    if not node.keywords:
        return None
    return {kw.arg: _value(kw.value, source) for kw in node.keywords if kw.arg is not None}
