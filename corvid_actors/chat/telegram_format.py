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


def split_message(text: str, limit: int = TELEGRAM_MAX_MESSAGE_CHARS) -> list[str]:
    """``text`` in chunks of at most ``limit`` characters, cut at a paragraph break, else a
    line break, else a space, else hard (a 5,000-character word is cut). Chunks keep their
    order; whitespace at a cut is dropped; an empty text gives no chunk."""
    if limit < 1:
        raise ValueError("limit must be positive")
    chunks: list[str] = []
    rest = text.strip()
    while rest:
        if len(rest) <= limit:
            chunks.append(rest)
            break
        window = rest[:limit + 1]  # a separator just past the limit still allows a full chunk
        cut = -1
        for separator in ("\n\n", "\n", " "):
            cut = window.rfind(separator)
            if cut > 0:
                break
        if cut <= 0:
            cut = limit
        chunk = rest[:cut].rstrip()
        if chunk:
            chunks.append(chunk)
        rest = rest[cut:].lstrip()
    return chunks
