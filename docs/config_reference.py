"""The configuration reference: every key of config/default.toml, generated.

Each key's description is its comment in ``config/default.toml`` (the comment block above
it, shared by the keys that follow it without a blank line; a trailing ``# …`` on its own
line adds to it); its type and check come from the section types (``Config`` and its
section dataclasses: ``config_sections.py``, ``tool_sections.py``, ``loop/settings.py``,
declared through ``config_schema.py``); its default is the packaged TOML's value; its
environment variable from ``corvid_actors.config.ENV_OVERRIDES``. ``hooks.py`` puts the
table into docs/site/configuration.md at build time, and
``tests/public_api/test_config_reference.py`` fails when a key has no description.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOML = ROOT / "config" / "default.toml"

HEADER = re.compile(r"^\[([A-Za-z0-9_.\-]+)\]\s*(#.*)?$")
KEY = re.compile(r'^("?[A-Za-z0-9_.\-]+"?)\s*=\s*(.*)$')

#: the unit a key's name promises, by its suffix
UNITS = (("_ms", "milliseconds"), ("_s", "seconds"), ("_bytes", "bytes"), ("_usd", "USD"),
         ("_chars", "characters"), ("_minutes", "minutes"), ("_min_b", "billion parameters"),
         ("_factor", "multiple"), ("_multiplier", "multiple"), ("_threshold", "fraction or count"))


@dataclass(frozen=True)
class Key:
    """One documented key: ``section.key``, its description, type, check, default, unit, env var."""

    section: str
    name: str
    description: str
    type: str
    check: str
    default: Any
    unit: str
    env: str

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"


def _comments(lines: list[str]) -> tuple[dict[tuple[str, str], str], dict[str, str]]:
    """(section, key) -> the comment that describes it; table path -> the comment above its header."""
    keys: dict[tuple[str, str], str] = {}
    tables: dict[str, str] = {}
    section, block, group = "", [], ""
    for raw in lines:
        line = raw.rstrip()
        if not line.strip():
            block, group = [], ""
            continue
        if line.lstrip().startswith("#"):
            text = line.lstrip()[1:].strip()
            if text.startswith("---"):
                continue
            block.append(text)
            continue
        header = HEADER.match(line)
        if header:
            section = header.group(1)
            tables[section] = " ".join(block)
            block, group = [], ""
            continue
        match = KEY.match(line)
        if match:
            if block:
                group = " ".join(block)
                block = []
            name = match.group(1).strip('"')
            value = match.group(2)
            trailing = value.split("  #", 1)[1].strip() if "  #" in value else ""
            keys[(section, name)] = " ".join(x for x in (group, trailing) if x)
    return keys, tables


def _hint(path: str) -> tuple[Any, dict[str, Any]]:
    """The type hint and field metadata of a dotted config path, from ``Config`` down."""
    from corvid_actors.config import Config

    cls: Any = Config
    hint: Any = Config
    metadata: dict[str, Any] = {}
    for part in path.split("."):
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise KeyError(path)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            raise KeyError(path)
        hint = typing.get_type_hints(cls)[part]
        metadata = dict(fields[part].metadata)
        cls = hint
    return hint, metadata


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint in simple:
        return simple[hint]
    if origin is tuple:
        return "list of numbers" if args and args[0] is float else "list of strings"
    if origin is dict:
        value = args[1] if len(args) > 1 else Any
        if typing.get_origin(value) is dict:
            return "table of tables"
        if value is str:
            return "table of strings"
        return "table of number lists"
    return getattr(hint, "__name__", str(hint))


def _unit(name: str, type_name: str) -> str:
    if type_name not in ("integer", "number", "list of numbers"):
        return ""
    for suffix, unit in UNITS:
        if name.endswith(suffix):
            return unit
    return ""


def keys(text: str | None = None) -> list[Key]:
    """Every key of the packaged defaults (or of ``text``, a TOML of the same sections), in
    file order."""
    from corvid_actors.config import ENV_OVERRIDES

    text = TOML.read_text(encoding="utf-8") if text is None else text
    data = tomllib.loads(text)
    described, tables = _comments(text.splitlines())
    env = {f"{section}.{key}": var for var, (section, key, _) in ENV_OVERRIDES.items()}
    out: list[Key] = []

    def walk(table: dict[str, Any], prefix: str) -> None:
        for name, value in table.items():
            path = f"{prefix}.{name}" if prefix else name
            hint, metadata = _hint(path)
            if isinstance(hint, type) and dataclasses.is_dataclass(hint):
                walk(value, path)
                continue
            if isinstance(value, dict) and path in tables:  # a [table] that is one key
                description = tables[path]
            else:
                description = described.get((prefix, name), "")
            type_name = _type_name(hint)
            out.append(Key(prefix, name, description, type_name, str(metadata.get("must", "")),
                           value, _unit(name, type_name), env.get(path, "")))

    for section, table in data.items():
        walk(table, section)
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(value: Any) -> str:
    if isinstance(value, dict) and not value:
        return "`{}`"
    return f"`{_cell(json.dumps(value, ensure_ascii=False))}`"


def markdown() -> str:
    """The reference as Markdown: one table per section."""
    lines: list[str] = []
    section = None
    for key in keys():
        if key.section != section:
            section = key.section
            lines += ["", f"### `[{section}]`", "", "| key | default | type | unit | what |",
                      "|---|---|---|---|---|"]
        what = key.description + (f" ({key.check})" if key.check else "")
        if key.env:
            what += f" Environment: `{key.env}`."
        lines.append(f"| `{key.name}` | {_default(key.default)} | {key.type} | {key.unit or '—'} "
                     f"| {_cell(what)} |")
    return "\n".join(lines).strip() + "\n"


if __name__ == "__main__":
    print(markdown())
