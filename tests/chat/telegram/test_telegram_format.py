"""Splitting at Telegram's limit and MarkdownV2 escaping (pure functions)."""

from __future__ import annotations

import pytest

from corvid_actors.chat.telegram_format import escape_markdown_v2, split_message, telegram_length
from corvid_actors.testing._telegram_wire import parse_markdown_v2


@pytest.mark.parametrize(("text", "limit", "chunks"), [
    ("", 10, []),
    ("short", 10, ["short"]),
    ("aaaa bbbb cccc", 9, ["aaaa bbbb", "cccc"]),
    ("para one\n\npara two", 12, ["para one", "para two"]),
    ("line one\nline two", 12, ["line one", "line two"]),
    ("x" * 25, 10, ["x" * 10, "x" * 10, "x" * 5]),
    ("exactly10!", 10, ["exactly10!"]),
    ("\U0001F600" * 5, 4, ["\U0001F600" * 2, "\U0001F600" * 2, "\U0001F600"]),  # 2 UTF-16 units each
    ("ab \U0001F600\U0001F600", 5, ["ab", "\U0001F600\U0001F600"]),
])
def test_split_message(text, limit, chunks):
    assert split_message(text, limit) == chunks


def test_split_keeps_every_word_in_order_and_every_chunk_within_the_limit():
    text = " ".join(f"w{i}" for i in range(3000)) + "\n\n" + "tail"
    chunks = split_message(text, 4096)
    assert all(len(c) <= 4096 for c in chunks) and len(chunks) == 5  # 16,895 characters
    assert chunks[-1].endswith("tail")
    assert " ".join(chunks).split() == text.split()


def test_escaping_round_trips_through_telegram_parsing():
    text = "1. Done! (see *notes*_v2.md) - x=y {a|b} ~`#+>[]\\ ok"
    escaped = escape_markdown_v2(text)
    assert parse_markdown_v2(escaped) == (text, None)
    assert parse_markdown_v2(text)[1] == "."  # unescaped, Telegram refuses it


def test_emoji_heavy_text_fits_telegram_in_utf16_units():
    text = "\U0001F600 " * 3000  # 9,000 UTF-16 units in 6,000 characters
    chunks = split_message(text)
    assert all(telegram_length(c) <= 4096 for c in chunks) and len(chunks) == 3
    assert " ".join(chunks).split() == text.split()
