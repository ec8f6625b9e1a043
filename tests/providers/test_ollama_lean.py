"""The lean chat clients (``providers/_ollama_lean``): a plain text line of a streamed chat
is a ``TextPart``, every other line the client's own ``ChatResponse``; over the stub server
with the real clients, and through the provider."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import pydantic
import pytest

from corvid_actors.config import Config
from corvid_actors.core.vocabulary import CancelToken
from corvid_actors.providers._ollama_lean import (
    LeanAsyncChatClient,
    LeanChatClient,
    SetCookieOnly,
    TextPart,
    chat_part,
)
from corvid_actors.providers._ollama_transport import AbortableTransport
from corvid_actors.providers.base import (
    ChatMessage,
    ErrorKind,
    ModelRequest,
    ProviderError,
    StreamEvent,
    TextDelta,
)
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.runtime.tree import default_providers
from corvid_actors.testing.ollama_stub import OllamaStubServer, Turn

MODEL = "llama3.1:8b"
CREATED_AT = "2024-07-01T12:00:00.000000Z"
USER = [{"role": "user", "content": "hi"}]
REQUEST = ModelRequest(model=MODEL, system="", messages=(ChatMessage("user", "hi"),))


def text_line(content: Any = "Hello", **changes: Any) -> dict[str, Any]:
    """A streamed line as Ollama sends it for a piece of text, with ``changes`` (a value
    of ``...`` removes the key)."""
    line = {"model": MODEL, "created_at": CREATED_AT,
            "message": {"role": "assistant", "content": content}, "done": False}
    line.update(changes)
    return {key: value for key, value in line.items() if value is not ...}


def message(**changes: Any) -> dict[str, Any]:
    """A text line's message with ``changes`` (a value of ``...`` removes the key)."""
    fields = {"role": "assistant", "content": "Hello", **changes}
    return {key: value for key, value in fields.items() if value is not ...}


# --- the line factory ----------------------------------------------------------------


@pytest.mark.parametrize("content", ["Hello", " world", "", "héllo ✓\n", "{\"json\": 1}"])
def test_a_plain_text_line_is_a_text_part_reading_as_the_chat_response(content: str) -> None:
    line = text_line(content)
    part, full = chat_part(**line), ollama.ChatResponse(**line)
    assert isinstance(part, TextPart)
    assert part.message.content == full.message.content == content
    assert part.message.role == full.message.role
    assert part.message.thinking is full.message.thinking is None
    assert part.message.tool_calls is full.message.tool_calls is None
    assert part.message.images is full.message.images is None
    assert part.done is full.done is False and part.done_reason is full.done_reason is None
    assert (part.model, part.created_at) == (full.model, full.created_at)


@pytest.mark.parametrize(
    "line",
    [
        text_line(message=message(content="", thinking="let me think")),
        text_line(message=message(content="", tool_calls=[
            {"function": {"name": "read_file", "arguments": {"path": "a.txt"}}}])),
        text_line(message=message(images=None)),
        text_line("", done=True, done_reason="stop", eval_count=3, prompt_eval_count=7),
        text_line(logprobs=[]),
        text_line(remote_model="gpt-oss:120b"),
        text_line(None),
        text_line(7),
        text_line(message=message(content=...)),
        text_line(message=message(role=...)),
        text_line(message=message(role=1)),
        text_line(model=...),
        text_line(model=None),
        text_line(created_at=...),
        text_line(done=...),
        text_line(done=0),
        text_line(done=None),
        text_line(message=None),
        text_line(message=...),
    ],
    ids=["thinking", "tool_calls", "images", "done line", "logprobs", "unknown key",
         "null content", "int content", "no content", "no role", "int role", "no model",
         "null model", "no created_at", "no done", "done 0", "done null", "null message",
         "no message"],
)
def test_any_other_line_is_the_clients_chat_response(line: dict[str, Any]) -> None:
    try:
        expected = ollama.ChatResponse(**line)
    except pydantic.ValidationError as invalid:
        with pytest.raises(pydantic.ValidationError) as info:
            chat_part(**line)
        assert info.value.errors() == invalid.errors()  # the same failure, word for word
        return
    part = chat_part(**line)
    assert type(part) is ollama.ChatResponse
    assert part == expected and part.model_fields_set == expected.model_fields_set


# --- the clients over the stub server ---------------------------------------------------


@pytest.fixture
def stub() -> Iterator[OllamaStubServer]:
    with OllamaStubServer() as server:
        yield server


def kinds(parts: list[Any]) -> list[str]:
    return ["text" if isinstance(p, TextPart) else "full" if isinstance(p, ollama.ChatResponse)
            else type(p).__name__ for p in parts]


TURN = Turn(text="one two three", thinking="hmm", tool_calls=[("read_file", {"path": "a.txt"})])
# the thinking line, three text lines, the tool-call line, the done line
EXPECTED_KINDS = ["full", "text", "text", "text", "full", "full"]


def test_the_sync_client_streams_text_lines_as_text_parts_and_the_rest_as_chat_responses(
    stub: OllamaStubServer,
) -> None:
    # the test that fails if an ollama release changes the ``_request`` seam
    stub.add_turn(TURN)
    with LeanChatClient(host=stub.url, timeout=5.0) as client:
        parts = list(client.chat(model=MODEL, messages=USER, stream=True))
        assert kinds(parts) == EXPECTED_KINDS
        assert "".join(p.message.content or "" for p in parts) == "one two three"
        assert parts[0].message.thinking == "hmm"
        assert parts[4].message.tool_calls[0].function.name == "read_file"
        assert parts[5].done is True and parts[5].eval_count == 4
        stub.add_reply("whole")
        whole = client.chat(model=MODEL, messages=USER)  # not streamed: the client's own
        assert type(whole) is ollama.ChatResponse and whole.message.content == "whole"


def test_the_async_client_streams_text_lines_as_text_parts_and_the_rest_as_chat_responses(
    stub: OllamaStubServer,
) -> None:
    async def chat() -> list[Any]:
        client = LeanAsyncChatClient(host=stub.url, timeout=5.0)
        try:
            return [part async for part in await client.chat(model=MODEL, messages=USER, stream=True)]
        finally:
            await client.close()

    stub.add_turn(TURN)
    parts = asyncio.run(chat())
    assert kinds(parts) == EXPECTED_KINDS
    assert "".join(p.message.content or "" for p in parts) == "one two three"


def test_an_error_line_mid_stream_is_still_the_clients_response_error(stub: OllamaStubServer) -> None:
    stub.add_fault("http_500", after_chunks=2, text="a b c d")
    seen: list[Any] = []
    with LeanChatClient(host=stub.url, timeout=5.0) as client, pytest.raises(ollama.ResponseError) as info:
        for part in client.chat(model=MODEL, messages=USER, stream=True):
            seen.append(part)
    assert kinds(seen) == ["text", "text"] and info.value.status_code == -1


# --- through the provider ---------------------------------------------------------------


def test_the_provider_chats_through_the_lean_clients(stub: OllamaStubServer) -> None:
    provider = OllamaProvider(stub.url)
    transport = AbortableTransport()
    with provider._new_chat_client(transport) as client:
        assert isinstance(client, LeanChatClient)

    async def async_client() -> ollama.AsyncClient:
        client = provider._new_async_client()
        await client.close()
        return client

    assert isinstance(asyncio.run(async_client()), LeanAsyncChatClient)


@pytest.mark.parametrize("fault, kind", [("http_500", ErrorKind.RETRYABLE),
                                         ("context_length", ErrorKind.CONTEXT_OVERFLOW)])
@pytest.mark.parametrize("on_loop", [False, True], ids=["stream", "astream"])
def test_an_error_line_after_text_lines_is_the_providers_classified_error(
    stub: OllamaStubServer, fault: str, kind: ErrorKind, on_loop: bool
) -> None:
    stub.add_fault(fault, after_chunks=2, text="a b c d")
    provider = OllamaProvider(stub.url, request_timeout_s=5.0)
    events: list[StreamEvent] = []
    with pytest.raises(ProviderError) as info:
        if on_loop:
            asyncio.run(provider.astream(REQUEST, events.append, CancelToken()))
        else:
            provider.stream(REQUEST, events.append, CancelToken())
    assert info.value.kind is kind and isinstance(info.value.__cause__, ollama.ResponseError)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "a b "


@pytest.mark.parametrize("on_loop", [False, True], ids=["stream", "astream"])
def test_a_reply_of_text_parts_and_chat_responses_is_read_whole(
    stub: OllamaStubServer, on_loop: bool
) -> None:
    stub.add_turn(Turn(text="The answer is 42.", done_reason="length"))
    provider = OllamaProvider(stub.url, request_timeout_s=5.0)
    events: list[StreamEvent] = []
    if on_loop:
        response = asyncio.run(provider.astream(REQUEST, events.append, CancelToken()))
    else:
        response = provider.stream(REQUEST, events.append, CancelToken())
    assert response.text == "The answer is 42." == "".join(
        e.text for e in events if isinstance(e, TextDelta))
    assert response.stop_reason == "length" and response.usage.output_tokens == 4
    assert response.model == MODEL and response.usage.input_tokens > 0


# --- the async client's connection cap (issue 37) -----------------------------------------


def _pool_cap(provider: OllamaProvider) -> tuple[int | None, int | None]:
    """The (max_connections, max_keepalive) httpcore's pool of the provider's real async
    client was made with."""

    async def make() -> tuple[int | None, int | None]:
        client = provider._new_async_client()
        try:
            pool = client._client._transport._pool  # the httpx transport's httpcore pool
            return pool._max_connections, pool._max_keepalive_connections
        finally:
            await client.close()

    return asyncio.run(make())


def test_the_async_clients_pool_is_capped_as_configured_never_below_the_slots(stub: OllamaStubServer) -> None:
    assert _pool_cap(OllamaProvider(stub.url)) == (sys.maxsize, 64)  # a provider made by hand: no cap
    assert _pool_cap(OllamaProvider(stub.url, max_connections=8)) == (8, 8)
    assert _pool_cap(default_providers(Config().replace(providers={"ollama_host": stub.url}))["ollama"]) \
        == (256, 64)  # type: ignore[arg-type]
    configured = default_providers(Config().replace(providers={"ollama_host": stub.url,
                                                               "ollama_max_connections": 32}))
    assert _pool_cap(configured["ollama"]) == (32, 32)  # type: ignore[arg-type]
    more_slots = default_providers(Config().replace(providers={"ollama_host": stub.url, "ollama_max_connections": 32},
                                                    slots={"max_parallel": 500}))
    assert _pool_cap(more_slots["ollama"])[0] == 500  # type: ignore[arg-type]
    uncapped = default_providers(Config().replace(providers={"ollama_host": stub.url,
                                                             "ollama_max_connections": 0}))
    assert _pool_cap(uncapped["ollama"])[0] == sys.maxsize  # httpcore's "no cap"  # type: ignore[arg-type]


def test_streams_beyond_the_cap_wait_for_a_connection_and_all_complete(stub: OllamaStubServer) -> None:
    for _ in range(3):
        stub.add_turn(Turn(text="one two three"))
    provider = OllamaProvider(stub.url, request_timeout_s=5.0, max_connections=1)

    async def three() -> list[str]:
        replies = await asyncio.gather(*(provider.astream(REQUEST, lambda e: None, CancelToken())
                                         for _ in range(3)))
        return [r.text for r in replies]

    assert asyncio.run(three()) == ["one two three"] * 3


# --- cookies: read only off a response that sets one (issue 37) ---------------------------


@pytest.mark.parametrize("make", [LeanChatClient, LeanAsyncChatClient], ids=["sync", "async"])
def test_the_lean_clients_keep_a_cookie_a_response_sets_and_read_no_other(make: Any) -> None:
    answers = iter([httpx.Response(200, json={"models": []}, headers={"Set-Cookie": "route=a; Path=/"}),
                    httpx.Response(200, json={"models": []}),
                    httpx.Response(200, json={"models": []}, headers={"Set-Cookie": "route=b; Path=/"})])
    sent: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("cookie"))
        return next(answers)

    transport = httpx.MockTransport(handler)
    if make is LeanChatClient:
        client = make(host="http://127.0.0.1:9", transport=transport)
        for _ in range(3):
            client.list()
    else:
        client = make(host="http://127.0.0.1:9", transport=transport)

        async def three() -> None:
            for _ in range(3):
                await client.list()

        asyncio.run(three())
    assert isinstance(client._client.cookies, SetCookieOnly)
    assert sent == [None, "route=a", "route=a"]  # the cookie set is sent back, as httpx does
    assert client._client.cookies.get("route") == "b"
