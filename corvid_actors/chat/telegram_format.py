"""Text for Telegram: MarkdownV2 escaping and splitting at the 4,096-character limit (pure).

Replies are sent with ``parse_mode=MarkdownV2`` and *every* reserved character escaped:
model output is not valid MarkdownV2 (an unescaped ``.`` or ``-`` makes Telegram refuse the
whole message with a 400), so it is shown verbatim and safely.
"""

from __future__ import annotations

#: Telegram's limit on a message's text, counted after entity parsing (unescaped)
TELEGRAM_MAX_MESSAGE_CHARS = 4096
_RESERVED = "_*[]()~`>#+-=|{}.!\\"


def escape_markdown_v2(text: str) -> str:
    """``text`` with every MarkdownV2 reserved character (and the backslash) escaped."""
    return "".join("\\" + ch if ch in _RESERVED else ch for ch in text)


def telegram_length(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units (an emoji outside the BMP is 2)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _fitting(text: str, limit: int) -> int:
    """How many characters of ``text`` fit in ``limit`` UTF-16 code units."""
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return i
    return len(text)


def split_message(text: str, limit: int = TELEGRAM_MAX_MESSAGE_CHARS) -> list[str]:
    """``text`` in chunks of at most ``limit`` (UTF-16 units, as Telegram counts), cut at a
    paragraph break, else a line break, else a space, else hard (a 5,000-character word is
    cut). Chunks keep their order; whitespace at a cut is dropped; an empty text gives no
    chunk."""
    if limit < 2:
        raise ValueError("limit must be at least 2 (one character outside the BMP)")
    chunks: list[str] = []
    rest = text.strip()
    while rest:
        fits = _fitting(rest, limit)
        if fits == len(rest):
            chunks.append(rest)
            break
        window = rest[:fits + 1]  # a separator just past the limit still allows a full chunk
        cut = -1
        for separator in ("\n\n", "\n", " "):
            cut = window.rfind(separator)
            if cut > 0:
                break
        if cut <= 0:
            cut = fits
        chunk = rest[:cut].rstrip()
        if chunk:
            chunks.append(chunk)
        rest = rest[cut:].lstrip()
    return chunks
