"""Multimodal user content: a message given as content blocks instead of a string.

A user message (``send_message``, ``start_process``, ``resume_process``) is either a
string or a sequence of content blocks in the Anthropic Messages API's shape, the shape
the original's sessions accept::

    [{"type": "text", "text": "What is in this picture?"},
     {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR…"}}]

Image sources are ``base64`` (``media_type`` one of :data:`IMAGE_MEDIA_TYPES`) or ``url``.
Blocks are checked once, where they enter the runtime (:func:`content_blocks`); the store
keeps them as given; providers that take images send them (Anthropic: the blocks as they
are; Ollama: base64 images in the message's ``images`` field when the model has the
``vision`` capability) and every other provider gets the text parts
(:func:`text_parts`).
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from collections.abc import Mapping, Sequence

from corvid_actors.core.jsontypes import WireJson
from corvid_actors.errors import InvalidContentError

#: a user message: a string, or content blocks (text and image)
UserContent = str | Sequence[Mapping[str, object]]

#: image media types the Messages API accepts for base64 sources
IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

#: the stored text of a message of images only (history, resume prompts, views), the original's
IMAGE_PLACEHOLDER = "[image attachment(s)]"


def content_blocks(content: UserContent) -> tuple[dict[str, WireJson], ...]:
    """The checked, copied blocks of ``content`` (``()`` for a plain string): caller JSON
    that goes on to provider payloads as it is.

    Raises :class:`InvalidContentError` naming the first bad block.
    """
    if isinstance(content, str):
        return ()
    if isinstance(content, bytes | bytearray) or not isinstance(content, Sequence):
        raise InvalidContentError(
            f"message content must be a string or a list of content blocks, not {type(content).__name__}")
    if not content:
        raise InvalidContentError("message content is an empty list of blocks: give at least one block")
    blocks: list[dict[str, WireJson]] = []
    for index, block in enumerate(content):
        blocks.append(copy.deepcopy(dict(_checked_block(index, block))))
    return tuple(blocks)


def _checked_block(index: int, block: object) -> Mapping[str, WireJson]:
    """``block`` if it is a valid text or image block; InvalidContentError otherwise."""
    where = f"content block {index}"
    if not isinstance(block, Mapping):
        raise InvalidContentError(f"{where} must be an object with a 'type', not {type(block).__name__}")
    kind = block.get("type")
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise InvalidContentError(f"{where} (text) needs a string 'text'")
        return block
    if kind != "image":
        raise InvalidContentError(f"{where} has type {kind!r}: only 'text' and 'image' blocks are accepted")
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise InvalidContentError(f"{where} (image) needs a 'source' object")
    if source.get("type") == "base64":
        if source.get("media_type") not in IMAGE_MEDIA_TYPES:
            allowed = ", ".join(sorted(IMAGE_MEDIA_TYPES))
            raise InvalidContentError(f"{where} (image) has media_type {source.get('media_type')!r}; use one of "
                                      f"{allowed}")
        data = source.get("data")
        if not isinstance(data, str) or not data:
            raise InvalidContentError(f"{where} (image) needs base64 'data'")
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidContentError(f"{where} (image) has 'data' that is not valid base64") from None
    elif source.get("type") == "url":
        if not isinstance(source.get("url"), str) or not source.get("url"):
            raise InvalidContentError(f"{where} (image) needs a 'url'")
    else:
        raise InvalidContentError(f"{where} (image) has source type {source.get('type')!r}: use 'base64' or 'url'")
    return block


def text_parts(blocks: Sequence[Mapping[str, object]]) -> str:
    """The text blocks joined by newlines: what a text-only provider is given."""
    return "\n".join(str(b["text"]) for b in blocks if b.get("type") == "text")


def stored_text(blocks: Sequence[Mapping[str, object]]) -> str:
    """The text kept in ``session_messages.content`` for blocks, as the original's
    ``sendMessage`` persists it: the text parts joined by newlines, or
    :data:`IMAGE_PLACEHOLDER` when there is no text. The images themselves are kept in
    ``content_blocks``."""
    return text_parts(blocks) or IMAGE_PLACEHOLDER


def image_blocks(blocks: Sequence[Mapping[str, object]]) -> list[Mapping[str, object]]:
    """The image blocks, in order."""
    return [b for b in blocks if b.get("type") == "image"]


__all__ = ["IMAGE_MEDIA_TYPES", "IMAGE_PLACEHOLDER", "UserContent", "content_blocks", "image_blocks",
           "stored_text", "text_parts"]


_HISTORY_TAG = re.compile(r"<(/?)conversation_history>", re.IGNORECASE)


def strip_conversation_history(text: str) -> str:
    """``text`` without any ``<conversation_history>…</conversation_history>`` block.

    Nested blocks are removed whole (depth counting, unlike a non-greedy regex that stops
    at the first closing tag); an unclosed block is dropped to the end of the text (it was
    cut by a length cap); a stray closing tag is dropped with the whitespace around it
    collapsed to one space (``"a </conversation_history> b"`` becomes ``"a b"``).
    Whitespace after a removed block goes with it, and the result is stripped.
    """
    out: list[str] = []
    depth = 0
    pos = 0
    for match in _HISTORY_TAG.finditer(text):
        closing = match.group(1) == "/"
        block_ended = False
        if depth == 0 and closing:  # a stray closing tag
            before = text[pos : match.start()]
            pos = match.end()
            after = pos
            while after < len(text) and text[after].isspace():
                after += 1
            spaced = before != before.rstrip() or after > pos
            out.append(before.rstrip() + (" " if spaced else ""))
            pos = after
            continue
        if depth == 0:
            out.append(text[pos : match.start()])
            depth = 1
        else:
            depth += -1 if closing else 1
            block_ended = depth == 0
        pos = match.end()
        if block_ended:
            while pos < len(text) and text[pos].isspace():
                pos += 1
    if depth == 0:
        out.append(text[pos:])
    return "".join(out).strip()
