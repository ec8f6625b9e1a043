"""How a config section is declared: names, types and checks here, values in the TOML.

``config/default.toml`` (shipped as ``corvid_actors/default.toml``) is the only place a
default is written. A section class declares its keys with their types and checks, and
:func:`section` fills every key's default from the packaged TOML when the class is
defined, so ``SupervisorConfig()`` is the packaged defaults and
``SupervisorConfig(max_restarts=1)`` changes one key. A key the class declares that the
TOML lacks, or a TOML key the class does not declare, is a :class:`ConfigError` at import:
the file and the code cannot drift apart.

The same coercion and checks validate the packaged defaults, a user file and the
environment (:mod:`corvid_actors.config`), so a bad value names its key wherever it comes
from. This module imports nothing of the runtime: every layer may declare its section.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any, TypeVar

from corvid_actors.errors import ConfigError

T = TypeVar("T")

#: field metadata: a value the loader sets from the environment only (credentials)
ENV_ONLY = "env_only"
#: field metadata: a structured calibration of a pure policy, not an operator's key
CALIBRATION = "calibration"


def check(rule: Callable[[Any], bool], text: str) -> dict[str, Any]:
    """Field metadata: ``rule(value)`` must hold, else the error says ``key = value <text>``."""
    return {"check": rule, "must": text}


POSITIVE = check(lambda v: v > 0, "must be > 0")
NON_NEGATIVE = check(lambda v: v >= 0, "must be >= 0")
FRACTION = check(lambda v: 0 < v <= 1, "must be in (0, 1]")
AT_LEAST_ONE = check(lambda v: v >= 1, "must be >= 1")


def one_of(*choices: str) -> dict[str, Any]:
    """Field metadata: the value must be one of ``choices``."""
    listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
    return check(lambda v: v in choices, f"must be {listed}")


def env_only() -> Any:
    """A key set from the environment only, never written in a file (a credential); empty
    until then."""
    return dataclasses.field(default="", metadata={ENV_ONLY: True})


def calibration(default_factory: Callable[[], Any]) -> Any:
    """A field that is not a config key: a structured table of a pure policy (tier caps,
    trim tiers), whose values live beside the policy. Tests may pass their own."""
    return dataclasses.field(default_factory=default_factory, metadata={CALIBRATION: True})


def is_config_key(f: dataclasses.Field[Any]) -> bool:
    """Whether a section field is read from files (not a calibration, not env-only)."""
    return not (f.metadata.get(CALIBRATION) or f.metadata.get(ENV_ONLY))


def values_of(section_obj: object) -> dict[str, Any]:
    """A section's config keys and values (calibrations left out; sub-tables as objects)."""
    fields = dataclasses.fields(section_obj)  # type: ignore[arg-type]
    return {f.name: getattr(section_obj, f.name) for f in fields if not f.metadata.get(CALIBRATION)}


def default_toml_text() -> str:
    """The packaged ``default.toml`` (a link to the repository's ``config/default.toml``)."""
    return resources.files("corvid_actors").joinpath("default.toml").read_text(encoding="utf-8")


@functools.cache
def packaged_defaults() -> Mapping[str, Any]:
    """The packaged defaults, parsed once."""
    return types.MappingProxyType(tomllib.loads(default_toml_text()))


def _table(path: str) -> Mapping[str, Any]:
    table: Any = packaged_defaults()
    for part in path.split("."):
        if not isinstance(table, Mapping) or part not in table:
            raise ConfigError(f"default.toml has no [{path}] table")
        table = table[part]
    if not isinstance(table, Mapping):
        raise ConfigError(f"default.toml: [{path}] must be a table")
    return table


def section(path: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: a frozen dataclass whose defaults are the ``[path]`` table of the
    packaged TOML (checked and coerced like any file). A sub-table field (a dataclass
    type) gets its default from ``[path.key]``, so one type may serve two tables with
    their own values (the loops' ``retry``)."""

    def decorate(cls: type[T]) -> type[T]:
        fill_defaults(cls, path, _table(path))
        return dataclasses.dataclass(frozen=True)(cls)

    return decorate


def fill_defaults(cls: type, path: str, table: Mapping[str, Any]) -> None:
    """Set each declared key's default from ``table`` (before the dataclass is made)."""
    hints = typing.get_type_hints(cls)
    declared = {name for name in inspect.get_annotations(cls) if not name.startswith("_")}
    skipped: set[str] = set()
    for name in declared:
        current = cls.__dict__.get(name, dataclasses.MISSING)
        metadata = current.metadata if isinstance(current, dataclasses.Field) else {}
        if metadata.get(CALIBRATION) or metadata.get(ENV_ONLY):
            skipped.add(name)
            continue
        if name not in table:
            raise ConfigError(f"default.toml lacks the key {path}.{name} ({cls.__name__} declares it)")
        value = coerce(f"{path}.{name}", hints[name], table[name], metadata)
        if dataclasses.is_dataclass(value):
            keys = {f.name for f in dataclasses.fields(value) if is_config_key(f)}
            if keys - set(table[name]):
                raise ConfigError("default.toml lacks the keys "
                                  + ", ".join(f"{path}.{name}.{k}" for k in sorted(keys - set(table[name]))))
        mutable = isinstance(value, dict) or dataclasses.is_dataclass(value)
        if isinstance(current, dataclasses.Field):
            if mutable:
                current.default_factory = functools.partial(_copy, value)
            else:
                current.default = value
        elif mutable:
            setattr(cls, name, dataclasses.field(default_factory=functools.partial(_copy, value)))
        else:
            setattr(cls, name, value)
    unknown = set(table) - declared - skipped
    if unknown:
        raise ConfigError(f"default.toml has keys {cls.__name__} does not declare: "
                          + ", ".join(f"{path}.{k}" for k in sorted(unknown)))


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


def build_section(key: str, cls: type[T], values: Mapping[str, Any]) -> T:
    """A section (or sub-table) from ``values``; absent keys keep the class defaults."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for name, raw in values.items():
        f = fields.get(name)
        if f is None or f.metadata.get(CALIBRATION):
            known = ", ".join(n for n, g in fields.items() if not g.metadata.get(CALIBRATION))
            raise ConfigError(f"unknown config key {key}.{name} (known: {known})")
        if isinstance(raw, Mapping) and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
            if dataclasses.is_dataclass(default):  # a partial sub-table keeps this section's defaults
                raw = {**{g.name: getattr(default, g.name) for g in dataclasses.fields(default)
                          if is_config_key(g)}, **raw}
        kwargs[name] = coerce(f"{key}.{name}", hints[name], raw, f.metadata)
    return cls(**kwargs)


def coerce(key: str, hint: Any, raw: Any, metadata: Mapping[str, Any] | None = None) -> Any:
    """``raw`` (from TOML or the environment) as type ``hint``, checked by the field's rule."""
    value = _coerce(key, hint, raw)
    rule = (metadata or {}).get("check")
    if rule is not None and not rule(value):
        raise ConfigError(f"config key {key} = {raw!r} {(metadata or {})['must']}")
    return value


def _coerce(key: str, hint: Any, raw: Any) -> Any:  # noqa: C901, PLR0911, PLR0912 - one case per type
    origin = typing.get_origin(hint)
    if hint is bool:
        if isinstance(raw, bool):
            return raw
        raise ConfigError(f"config key {key} must be true or false, got {raw!r}")
    if hint is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        raise ConfigError(f"config key {key} must be an integer, got {raw!r}")
    if hint is float:
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
        raise ConfigError(f"config key {key} must be a number, got {raw!r}")
    if hint is str:
        if isinstance(raw, str):
            return raw
        raise ConfigError(f"config key {key} must be a string, got {raw!r}")
    if origin is tuple and typing.get_args(hint)[0] is float:
        if isinstance(raw, list | tuple) and raw and all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in raw):
            return tuple(float(x) for x in raw)
        raise ConfigError(f"config key {key} must be a non-empty list of numbers, got {raw!r}")
    if origin is tuple:
        if isinstance(raw, list | tuple) and all(isinstance(x, str) for x in raw):
            return tuple(raw)
        raise ConfigError(f"config key {key} must be a list of strings, got {raw!r}")
    if origin is dict and typing.get_origin(typing.get_args(hint)[1]) is dict:
        # A table of tables ([mcp.servers.NAME]); its section validates the rows.
        if isinstance(raw, Mapping) and all(isinstance(row, Mapping) for row in raw.values()):
            return {str(name): dict(row) for name, row in raw.items()}
        raise ConfigError(f"config key {key} must be a table of tables, got {raw!r}")
    if origin is dict and typing.get_args(hint)[1] is str:
        # a table of strings ([tools.sandbox] network); its section checks the values
        if isinstance(raw, Mapping) and all(isinstance(row, str) for row in raw.values()):
            return {str(name): row for name, row in raw.items()}
        raise ConfigError(f"config key {key} must be a table of strings, got {raw!r}")
    if origin is dict:
        if isinstance(raw, Mapping):
            out = {}
            for name, row in raw.items():
                if not (isinstance(row, list | tuple) and all(isinstance(x, int | float) for x in row)):
                    raise ConfigError(f"config key {key}.{name} must be a list of numbers, got {row!r}")
                out[str(name)] = tuple(float(x) for x in row)
            return out
        raise ConfigError(f"config key {key} must be a table, got {raw!r}")
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        # a table inside a section ([tools.sandbox]): checked key by key like a section
        if isinstance(raw, Mapping):
            return build_section(key, hint, raw)
        raise ConfigError(f"config key {key} must be a table, got {raw!r}")
    raise ConfigError(f"config key {key}: unsupported type {hint!r}")  # pragma: no cover
