"""The configuration reference of the docs site (docs/site/configuration.md) is generated
from config/default.toml and the section types when the site is built
(docs/config_reference.py); these tests fail when a key would show without a description,
or when the page and the code would not list the same keys."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import typing
from pathlib import Path

import pytest

from corvid_actors.config import Config
from corvid_actors.schema.fields import is_config_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def declared_keys(cls: type, prefix: str = "") -> set[str]:
    """Every key the section types declare (a sub-table of keys walked into)."""
    hints = typing.get_type_hints(cls)
    out: set[str] = set()
    for f in dataclasses.fields(cls):
        if not is_config_key(f):
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        hint = hints[f.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            out |= declared_keys(hint, path)
        else:
            out.add(path)
    return out


def test_every_key_has_a_description(reference):
    keys = reference.keys()
    assert len(keys) > 150
    assert [key.path for key in keys if not key.description.strip()] == []


def test_the_reference_lists_exactly_the_keys_the_code_declares(reference):
    assert {key.path for key in reference.keys()} == declared_keys(Config)


def test_each_key_shows_its_default_type_unit_and_environment_variable(reference):
    by_path = {key.path: key for key in reference.keys()}
    timeout = by_path["supervisor.session_timeout_s"]
    assert (timeout.default, timeout.type, timeout.unit, timeout.env) == (1800.0, "number", "seconds",
                                                                         "AGENT_TIMEOUT_MS")
    assert "stopped" in timeout.description and timeout.check == "must be > 0"
    # a key under a comment it shares with the keys before it takes that comment
    assert by_path["approvals.chat_timeout_s"].description == by_path["approvals.timeout_s"].description
    assert by_path["providers.anthropic_prices"].type == "table of number lists"
    assert "| `session_timeout_s` | `1800.0` | number | seconds |" in reference.markdown()


def test_a_key_without_a_comment_is_caught(reference):
    text = "[supervisor]\n# Described.\nsession_timeout_s = 10.0\n\nmax_restarts = 2\n"
    described = {key.path: key.description for key in reference.keys(text)}
    assert described == {"supervisor.session_timeout_s": "Described.", "supervisor.max_restarts": ""}


def test_the_configuration_page_carries_the_marker_the_build_replaces():
    page = (ROOT / "docs" / "site" / "configuration.md").read_text(encoding="utf-8")
    hooks = (ROOT / "docs" / "hooks.py").read_text(encoding="utf-8")
    assert page.count("<!-- config-reference -->") == 1 and '"<!-- config-reference -->"' in hooks
