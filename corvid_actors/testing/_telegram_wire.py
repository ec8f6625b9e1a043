"""The wire side of the Telegram stub (pure): request parameters as the Bot API accepts
them, MarkdownV2 parsed as Telegram checks it, and the Bot API's error bodies.
"""

from __future__ import annotations

import json
import time
import urllib.parse

from corvid_actors.core.jsontypes import WireJson

#: characters MarkdownV2 reserves; outside entities they must be escaped with a backslash
MARKDOWN_V2_RESERVED = frozenset("_*[]()~`>#+-=|{}.!")
#: fields whose form-encoded value is a plain string (all others are JSON-encoded)
_STRING_FIELDS = frozenset({"text", "parse_mode", "callback_query_id", "action", "url", "secret_token",
                            "inline_message_id"})


def request_params(body: bytes, content_type: str, query: str) -> dict[str, WireJson]:
    """A call's parameters from a JSON body, a form body or the query string."""
    if "json" in content_type and body:
        return dict(json.loads(body))
    fields = urllib.parse.parse_qs(body.decode() if body else query, keep_blank_values=True)
    params: dict[str, WireJson] = {}
    for key, values in fields.items():
        value = values[-1]
        if key in _STRING_FIELDS:
            params[key] = value
            continue
        try:
            params[key] = json.loads(value)
        except ValueError:
            params[key] = value
    return params


def parse_markdown_v2(text: str) -> tuple[str, str | None]:
    """The plain text of escaped MarkdownV2 (entities are not interpreted: every reserved
    character must come escaped), and the first unescaped reserved character, if any."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if ch in MARKDOWN_V2_RESERVED or ch == "\\":
            return "".join(out), ch
        out.append(ch)
        i += 1
    return "".join(out), None


def plain_text(params: dict[str, WireJson]) -> str:
    """A message's text as Telegram shows it (MarkdownV2 escapes removed)."""
    text = str(params.get("text", ""))
    return parse_markdown_v2(text)[0] if params.get("parse_mode") == "MarkdownV2" else text


def api_error(code: int, description: str, parameters: dict[str, WireJson] | None = None) -> dict[str, WireJson]:
    """A Bot API error body (``parameters`` carries e.g. ``retry_after``)."""
    body: dict[str, WireJson] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return body


def now() -> int:
    """A message date: Unix seconds."""
    return int(time.time())
