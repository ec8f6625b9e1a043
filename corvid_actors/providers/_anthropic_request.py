"""Anthropic request conversion (pure): our conversation and tool specs as Messages API
``messages`` and ``tools``.
"""

from __future__ import annotations

import copy
from typing import Any

from corvid_actors.core.vocabulary import ToolSpec
from corvid_actors.providers.base import ChatMessage


def to_anthropic_messages(messages: tuple[ChatMessage, ...]) -> tuple[list[dict[str, Any]], str]:
    """Convert our conversation to Messages API ``messages``, plus extra system text.

    Assistant tool calls become ``tool_use`` blocks (ids kept); consecutive tool results
    and the user text after them form one user message (``tool_result`` blocks first, as
    the API requires). ``system``-role entries have no place in ``messages``: their text
    is returned to be appended to the system prompt.
    """
    out: list[dict[str, Any]] = []
    extra_system: list[str] = []
    for message in messages:
        if message.role == "system":
            extra_system.append(message.content)
            continue
        if message.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                for c in message.tool_calls
            ]
            if blocks:  # the API rejects an empty assistant turn
                out.append({"role": "assistant", "content": blocks})
            continue
        if message.role == "tool":
            blocks = [{"type": "tool_result", "tool_use_id": message.tool_call_id or "",
                       "content": message.content, "is_error": message.is_error}]
        elif message.blocks:
            # multimodal user content goes as given: text and image blocks, in order
            blocks = [copy.deepcopy(b) for b in message.blocks]
        else:
            blocks = [{"type": "text", "text": message.content}]
        if out and out[-1]["role"] == "user":
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": "user", "content": blocks})
    return out, "\n\n".join(extra_system)


def to_anthropic_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """Our tool specs as Messages API tool definitions."""
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]
