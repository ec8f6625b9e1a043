"""Content-aware token estimation (seed invariant 11), as table tests."""

from __future__ import annotations

import math

import pytest

from corvid_actors.loop.tokens import (
    TokenSettings,
    chars_per_token,
    estimate_messages_tokens,
    estimate_tokens,
)
from corvid_actors.providers.base import ChatMessage, ToolCall

PROSE = "The quick brown fox jumps over the lazy dog and then runs into the forest. " * 10
CODE = "def f(x):\n    return {k: v[0] for (k, v) in x.items() if v != []}  # map\n" * 10
YAML = "name: corvid\nversion: 1\nitems:\n  - a: 1\n" * 10
JSON = '{\n  "name": "corvid",\n  "version": "1.0",\n  "deps": 3\n}\n' * 10
# about 8 % code symbols: between the prose and code edges
MIXED = "Call foo(x) and bar(y) then check the result." * 5


@pytest.mark.parametrize(
    ("text", "expected_cpt"),
    [
        (PROSE, 4.0),  # 0.25 tokens/char
        (CODE, 3.0),  # ≈0.33 tokens/char
        (YAML, 2.5),  # every line a mapping entry
        (JSON, 0.6 * 2.5 + 0.4 * 4.0),  # 3 of 5 lines are "key": lines, blended
    ],
)
def test_chars_per_token_by_content(text: str, expected_cpt: float) -> None:
    assert chars_per_token(text) == pytest.approx(expected_cpt)
    assert estimate_tokens(text) == math.ceil(len(text) / expected_cpt)


def test_symbol_density_between_edges_blends_linearly() -> None:
    symbols = sum(1 for c in MIXED if c in "()")
    density = symbols / len(MIXED)
    assert 0.05 < density < 0.12
    expected = 4.0 + (density - 0.05) / 0.07 * (3.0 - 4.0)
    assert chars_per_token(MIXED) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2)])
def test_small_texts_round_up(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_code_counts_more_tokens_than_prose_of_same_length() -> None:
    prose, code = PROSE[:600], CODE[:600]
    assert estimate_tokens(code) > estimate_tokens(prose)


def test_settings_change_the_ratio() -> None:
    assert estimate_tokens("x" * 100, TokenSettings(prose_chars_per_token=2.0)) == 50


def test_messages_estimate_adds_system_overhead_and_tool_calls() -> None:
    plain = [ChatMessage(role="user", content=PROSE)]
    base = estimate_messages_tokens(plain)
    assert base == estimate_tokens(PROSE) + TokenSettings().message_overhead_tokens
    assert estimate_messages_tokens(plain, system=PROSE) == base + estimate_tokens(PROSE)
    call = ToolCall("c1", "read_file", {"path": "src/" + "a" * 200 + ".py"})
    with_call = [*plain, ChatMessage(role="assistant", tool_calls=(call,))]
    assert estimate_messages_tokens(with_call) > base + TokenSettings().message_overhead_tokens + 40
