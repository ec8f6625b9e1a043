"""The ``ollama`` clients, minus pydantic for the plain text lines of a streamed chat.

A streamed ``/api/chat`` reply is one NDJSON line per token, and most of the client's own
cost per line is validating it into an ``ollama.ChatResponse`` (measured: ~5.6 us a line,
~2 us with a plain object). :class:`LeanChatClient` and :class:`LeanAsyncChatClient` are
the official clients with one change: in a streamed chat, a line of exactly the plain
text shape Ollama sends (``model`` and ``created_at`` strings, a ``message`` of only
``role`` and ``content`` strings, ``done`` false, nothing else) becomes a
:class:`TextPart`, a slotted object with the attributes the provider reads. Every other line — the final
``done`` line, thinking, tool calls, images, a key or type we did not expect — is the
client's own ``ChatResponse(**line)``, validated as before; the transport, the request,
HTTP errors and the ``ResponseError`` of an ``error`` line are the client's too.

The seam is the client's private ``_request(cls, *args, stream=..., **kwargs)``, whose
streaming generator calls ``cls(**line)`` per line (ollama 0.6): the tests check over
the stub server that text lines do arrive as :class:`TextPart`, so a release that
changes that seam fails them instead of silently losing the speed-up.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeAlias

import httpx
import ollama

#: a key the line did not have (not the same as a null: a pydantic model records which
#: fields it was given)
_ABSENT: Any = object()


class TextMessage:
    """The ``message`` of a :class:`TextPart`: ``role`` and ``content``; the other
    fields of ``ollama.Message`` that the provider reads are None."""

    __slots__ = ("role", "content")
    thinking: ClassVar[None] = None
    images: ClassVar[None] = None
    tool_calls: ClassVar[None] = None

    def __init__(self, role: str, content: str) -> None:
        self.role = role
        self.content = content


class TextPart:
    """One plain text line of a streamed chat, with the fields an ``ollama.ChatResponse``
    would give it (``done`` False, the end's fields None), without the validation."""

    __slots__ = ("model", "created_at", "message")
    done: ClassVar[bool] = False
    done_reason: ClassVar[str | None] = None

    def __init__(self, model: str, created_at: str, message: TextMessage) -> None:
        self.model = model
        self.created_at = created_at
        self.message = message


#: what the provider reads a streamed chat line as
ChatPart: TypeAlias = TextPart | ollama.ChatResponse


def chat_part(*, model: Any = _ABSENT, created_at: Any = _ABSENT, message: Any = _ABSENT,
              done: Any = _ABSENT, **rest: Any) -> ChatPart:
    """One decoded line of a streamed chat, called as the client calls its ``cls``
    (``cls(**line)``): a :class:`TextPart` when the line is exactly a plain text line as
    Ollama sends it, ``{"model": str, "created_at": str, "message": {"role": str,
    "content": str}, "done": false}``; else ``ollama.ChatResponse(**line)``, as the client
    would build it. (The line's four usual keys are parameters, not read from a ``**line``
    dict: ~0.4 us a line less.)"""
    if (
        done is False
        and not rest
        and type(message) is dict
        and len(message) == 2
        and type(role := message.get("role")) is str
        and type(content := message.get("content")) is str
        and type(model) is str
        and type(created_at) is str
    ):
        return TextPart(model, created_at, TextMessage(role, content))
    given = {"model": model, "created_at": created_at, "message": message, "done": done}
    line = {key: value for key, value in given.items() if value is not _ABSENT}
    return ollama.ChatResponse(**line, **rest)


class SetCookieOnly(httpx.Cookies):
    """httpx's cookie jar, read for a response only when it sets a cookie.

    httpx hands every response to ``Cookies.extract_cookies``, which wraps it (and its
    request) in ``urllib`` look-alikes, an ``email.message.Message`` of every header
    included, for ``CookieJar`` to find no ``Set-Cookie`` in it: 7 % of the I/O loop's CPU
    per model call (issue 37 item 1; Ollama sets no cookies). A response without the
    header changes no jar, so skipping it changes nothing."""

    def extract_cookies(self, response: httpx.Response) -> None:
        """The jar's own, for a response with a ``Set-Cookie`` header (see the class)."""
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class LeanChatClient(ollama.Client):
    """``ollama.Client`` whose streamed chats give a :class:`TextPart` per plain text
    line (see the module docstring); everything else is the client's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client._cookies = SetCookieOnly()  # httpx's ``cookies`` setter would copy it into a plain jar

    def _request(self, cls: Any, *args: Any, stream: bool = False, **kwargs: Any) -> Any:
        if stream and cls is ollama.ChatResponse:
            cls = chat_part
        return super()._request(cls, *args, stream=stream, **kwargs)


class LeanAsyncChatClient(ollama.AsyncClient):
    """``ollama.AsyncClient`` whose streamed chats give a :class:`TextPart` per plain
    text line (see the module docstring); everything else is the client's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client._cookies = SetCookieOnly()  # as LeanChatClient's

    async def _request(self, cls: Any, *args: Any, stream: bool = False, **kwargs: Any) -> Any:
        if stream and cls is ollama.ChatResponse:
            cls = chat_part
        return await super()._request(cls, *args, stream=stream, **kwargs)
