"""Ollama request building: our conversation and tools in the shapes the ``ollama`` client sends.

Native mode sends tools as function schemas and calls as ``tool_calls``; text-tools
mode (see :mod:`corvid_actors.providers.text_tools`) puts the tool instructions in the
system prompt and replays calls and results as text.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import ollama
from loguru import logger

from corvid_actors.core.vocabulary import ToolSpec
from corvid_actors.providers.base import ChatMessage, ModelRequest
from corvid_actors.providers.text_tools import (
    format_tool_calls,
    tool_instructions,
    wrap_tool_output,
)


def ollama_tool(spec: ToolSpec) -> dict[str, Any]:
    """A tool in the shape the client validates (it keeps only these fields anyway)."""
    params = spec.parameters or {}
    properties: dict[str, Any] = {}
    for key, prop in (params.get("properties") or {}).items():
        prop = prop if isinstance(prop, Mapping) else {}
        kept = {k: prop[k] for k in ("type", "items", "enum") if k in prop}
        if isinstance(prop.get("description"), str):
            kept["description"] = prop["description"]
        properties[key] = kept
    function: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "parameters": {"type": "object", "properties": properties},
    }
    if params.get("required"):
        function["parameters"]["required"] = list(params["required"])
    return {"type": "function", "function": function}


def build_messages(request: ModelRequest, *, text_tools: bool, images: bool = False) -> list[dict[str, Any]]:
    """Our conversation as Ollama chat messages.

    Multimodal user messages send their text parts; with ``images`` (the model has the
    ``vision`` capability) their base64 images go in the message's ``images`` field too
    (Ollama cannot fetch ``url`` images: those are left out).

    Native mode: assistant ``tool_calls`` and ``tool`` messages with ``tool_name`` (the
    client drops ids, so results pair with calls by order and name). Text-tools mode:
    the tool instructions join the system prompt, calls are replayed as the JSON array
    the model was asked to write, and consecutive results become one user message of
    ``«tool_output»`` blocks.
    """
    system = request.system
    if text_tools and request.tools:
        system = (system + "\n\n" if system else "") + tool_instructions(request.tools)
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    merging_results = False
    for message in request.messages:
        if message.role == "tool" and text_tools:
            wrapped = wrap_tool_output(
                message.tool_name or "tool", message.content, is_error=message.is_error
            )
            if merging_results:
                out[-1]["content"] += "\n\n" + wrapped
            else:
                out.append({"role": "user", "content": wrapped})
            merging_results = True
            continue
        merging_results = False
        if message.role == "tool":
            out.append(
                {"role": "tool", "content": message.content, "tool_name": message.tool_name or ""}
            )
        elif message.role == "assistant" and message.tool_calls:
            out.append(_assistant_with_calls(message, text_tools=text_tools))
        else:
            entry: dict[str, Any] = {"role": message.role, "content": message.content}
            attached = _base64_images(message) if images else []
            if attached:
                entry["images"] = attached
            out.append(entry)
    return out


def _base64_images(message: ChatMessage) -> list[ollama.Image]:
    out = []
    for block in message.blocks:
        source = block.get("source") or {}
        if block.get("type") != "image" or source.get("type") != "base64":
            continue
        try:
            raw = base64.b64decode(source.get("data", ""), validate=True)
        except (binascii.Error, ValueError):
            logger.warning("an image block with invalid base64 data was left out of the Ollama request")
            continue
        out.append(ollama.Image(value=raw))
    return out


def _assistant_with_calls(message: ChatMessage, *, text_tools: bool) -> dict[str, Any]:
    if text_tools:
        content = (message.content + "\n" if message.content else "") + format_tool_calls(
            message.tool_calls
        )
        return {"role": "assistant", "content": content}
    calls = [{"function": {"name": c.name, "arguments": c.arguments}} for c in message.tool_calls]
    return {"role": "assistant", "content": message.content, "tool_calls": calls}
