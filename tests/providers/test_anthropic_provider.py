"""AnthropicProvider over the real ``anthropic`` SDK against the loopback stub server."""

from __future__ import annotations

import os
import queue
import socket
import threading
from collections.abc import Iterator

import anthropic
import freezegun
import httpx2
import pytest

from corvid_actors.core.vocabulary import CancelToken, StreamCancelled, ToolSpec
from corvid_actors.providers.anthropic import (
    AnthropicProvider,
    ModelPrice,
    classify_anthropic_error,
    cost_usd,
)
from corvid_actors.providers.base import (
    ChatMessage,
    ErrorKind,
    ModelRequest,
    ModelResponse,
    ProviderError,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallStarted,
    Usage,
)
from corvid_actors.testing.anthropic_stub import AnthropicStubServer

MODEL = "claude-sonnet-5-5"
WAIT_S = 1.0
PRICE = ModelPrice(input_per_mtok=3.0, output_per_mtok=15.0, cache_read_per_mtok=0.3, cache_write_per_mtok=3.75)


@pytest.fixture(autouse=True)
def _scrub_anthropic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)


@pytest.fixture
def stub() -> Iterator[AnthropicStubServer]:
    with AnthropicStubServer() as server:
        yield server


@pytest.fixture(scope="module")
def http_client() -> Iterator[httpx2.Client]:
    # One pool for the module: building a client (its TLS context) costs ~0.1 s.
    with anthropic.DefaultHttpxClient() as client:
        yield client


@pytest.fixture
def provider(stub: AnthropicStubServer, http_client: httpx2.Client) -> AnthropicProvider:
    return AnthropicProvider("test-key", base_url=stub.url, prices={"claude-sonnet-5": PRICE}, timeout_s=5.0,
                             health_timeout_s=WAIT_S, http_client=http_client)


def _request(*messages: ChatMessage, tools: tuple[ToolSpec, ...] = ()) -> ModelRequest:
    return ModelRequest(MODEL, "You are terse.", messages or (ChatMessage("user", "hi"),), tools)


def _stream(provider: AnthropicProvider, request: ModelRequest | None = None,
            cancel: CancelToken | None = None) -> tuple[ModelResponse, list[StreamEvent]]:
    events: list[StreamEvent] = []
    response = provider.stream(request or _request(), events.append, cancel or CancelToken())
    return response, events


def _fails(provider: AnthropicProvider, request: ModelRequest | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        _stream(provider, request)
    return caught.value


def _refused_url() -> str:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- streaming ------------------------------------------------------------------------------


def test_streams_text_deltas_and_returns_the_whole_reply(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    stub.add_reply("Hello brave new world", chunks=4)
    response, events = _stream(provider)
    assert events == [TextDelta("Hello "), TextDelta("brave "), TextDelta("new wo"), TextDelta("rld")]
    assert response.text == "Hello brave new world"
    assert response.stop_reason == "end_turn"
    assert response.model == MODEL
    assert response.tool_calls == ()


def test_several_tool_calls_with_split_arguments(stub: AnthropicStubServer, provider: AnthropicProvider) -> None:
    stub.add_tool_use([("read_file", {"path": "a.py", "limit": 20}), ("run_command", {"command": "ls -la"})],
                      text="Checking.", split_into=5)
    response, events = _stream(provider)
    calls = response.tool_calls
    assert [c.name for c in calls] == ["read_file", "run_command"]
    assert calls[0].arguments == {"path": "a.py", "limit": 20}
    assert calls[1].arguments == {"command": "ls -la"}
    assert all(c.arguments_error is None for c in calls)
    assert [e for e in events if isinstance(e, ToolCallStarted)] == [
        ToolCallStarted(calls[0].id, "read_file"), ToolCallStarted(calls[1].id, "run_command")]
    assert response.text == "Checking."
    assert response.stop_reason == "tool_use"


def test_malformed_tool_arguments_become_an_arguments_error(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    stub.add_raw_tool_use("write_file", ['{"path": "a.txt", ', '"content": '])
    stub.add_raw_tool_use("write_file", ["[1, 2]"])
    truncated, _ = _stream(provider)
    not_an_object, _ = _stream(provider)
    assert truncated.tool_calls[0].arguments == {}
    assert "not valid JSON" in (truncated.tool_calls[0].arguments_error or "")
    assert "must be a JSON object" in (not_an_object.tool_calls[0].arguments_error or "")


def test_tool_results_round_trip_as_one_user_message_with_is_error(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    history = (
        ChatMessage("user", "look around"),
        ChatMessage("assistant", "Sure.", tool_calls=(ToolCall("toolu_A", "read_file", {"path": "x"}),
                                                      ToolCall("toolu_B", "run_command", {"command": "false"}))),
        ChatMessage("tool", "file body", tool_call_id="toolu_A", tool_name="read_file"),
        ChatMessage("tool", "exit 1", tool_call_id="toolu_B", tool_name="run_command", is_error=True),
        ChatMessage("user", "and now?"),
    )
    tools = (ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),)
    _stream(provider, _request(*history, tools=tools))
    body = stub.message_requests[-1].json
    assert body["system"] == "You are terse."
    assert body["tools"] == [{"name": "read_file", "description": "Read a file",
                              "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Sure."},
        {"type": "tool_use", "id": "toolu_A", "name": "read_file", "input": {"path": "x"}},
        {"type": "tool_use", "id": "toolu_B", "name": "run_command", "input": {"command": "false"}},
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_A", "content": "file body", "is_error": False},
        {"type": "tool_result", "tool_use_id": "toolu_B", "content": "exit 1", "is_error": True},
        {"type": "text", "text": "and now?"},
    ]


def test_system_role_messages_join_the_system_prompt(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    _stream(provider, _request(ChatMessage("system", "Summary so far: x."), ChatMessage("user", "go")))
    body = stub.message_requests[-1].json
    assert body["system"] == "You are terse.\n\nSummary so far: x."
    assert [m["role"] for m in body["messages"]] == ["user"]


# --- usage and cost ---------------------------------------------------------------------------


def test_usage_with_cache_tokens_and_cost_from_the_price_table(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    stub.add_reply("ok", usage={"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 5000,
                                "cache_creation_input_tokens": 400})
    response, _ = _stream(provider)
    assert response.usage == Usage(1000, 200, 5000, 400)
    # the table is keyed "claude-sonnet-5", a prefix of the model name
    assert response.cost_usd == pytest.approx((1000 * 3 + 200 * 15 + 5000 * 0.3 + 400 * 3.75) / 1e6)


def test_a_model_without_a_price_costs_nothing(stub: AnthropicStubServer, http_client: httpx2.Client) -> None:
    provider = AnthropicProvider("k", http_client=http_client, base_url=stub.url, timeout_s=5.0)
    response, _ = _stream(provider)
    provider.close()
    assert response.cost_usd == 0.0
    assert response.usage.output_tokens > 0


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (Usage(1_000_000, 0), 3.0),
        (Usage(0, 1_000_000), 15.0),
        (Usage(0, 0, 1_000_000, 0), 0.3),
        (Usage(0, 0, 0, 1_000_000), 3.75),
        (Usage(), 0.0),
    ],
)
def test_cost_usd_prices_each_kind_of_token(usage: Usage, expected: float) -> None:
    assert cost_usd(usage, PRICE) == pytest.approx(expected)
    assert cost_usd(usage, None) == 0.0


# --- error classification over the wire ------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected", "status", "error_type"),
    [
        ("http_429", ErrorKind.RETRYABLE, 429, "rate_limit_error"),
        ("http_500", ErrorKind.RETRYABLE, 500, "api_error"),
        ("http_529", ErrorKind.RETRYABLE, 529, "overloaded_error"),
        ("http_401", ErrorKind.FATAL, 401, "authentication_error"),
        ("http_400", ErrorKind.FATAL, 400, "invalid_request_error"),
        ("context_overflow", ErrorKind.CONTEXT_OVERFLOW, 400, "invalid_request_error"),
    ],
)
def test_http_faults_are_classified(stub: AnthropicStubServer, provider: AnthropicProvider, kind: str,
                                    expected: ErrorKind, status: int, error_type: str) -> None:
    stub.add_fault(kind)
    error = _fails(provider)
    assert (error.kind, error.status, error.error_type) == (expected, status, error_type)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({"retry_after_s": 7}, 7.0), ({"retry_after_ms": 1500}, 1.5), ({"retry_after_s": 9, "retry_after_ms": 250}, 0.25)],
)
def test_retry_after_headers_are_parsed(stub: AnthropicStubServer, provider: AnthropicProvider,
                                        headers: dict, expected: float) -> None:
    stub.add_fault("http_429", **headers)
    assert _fails(provider).retry_after_s == pytest.approx(expected)


@pytest.mark.parametrize(
    ("error_type", "message", "expected"),
    [
        ("overloaded_error", None, ErrorKind.RETRYABLE),
        ("api_error", None, ErrorKind.RETRYABLE),
        ("rate_limit_error", None, ErrorKind.RETRYABLE),
        ("invalid_request_error", "messages.1: bad block", ErrorKind.FATAL),
        ("invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum", ErrorKind.CONTEXT_OVERFLOW),
    ],
)
def test_in_stream_error_events_are_classified_by_type(
    stub: AnthropicStubServer, provider: AnthropicProvider, error_type: str, message: str | None,
    expected: ErrorKind,
) -> None:
    stub.add_fault("stream_error", error_type=error_type, message=message, after_events=4)
    error = _fails(provider)
    assert (error.kind, error.error_type) == (expected, error_type)


def test_a_dropped_stream_is_retryable(stub: AnthropicStubServer, provider: AnthropicProvider) -> None:
    stub.add_fault("drop", after_events=3)
    error = _fails(provider)
    assert error.kind is ErrorKind.RETRYABLE
    assert isinstance(error.__cause__, httpx2.RemoteProtocolError)


def test_a_stalled_stream_times_out_as_retryable(stub: AnthropicStubServer, http_client: httpx2.Client) -> None:
    stub.add_fault("stall", after_events=3)
    provider = AnthropicProvider("k", http_client=http_client, base_url=stub.url, timeout_s=0.1)
    try:
        assert _fails(provider).kind is ErrorKind.RETRYABLE
    finally:
        provider.close()
    # close() left the injected pool open for the next user
    assert _stream(AnthropicProvider("k", base_url=stub.url, http_client=http_client))[0].text == "OK"


def test_connection_refused_is_retryable(http_client: httpx2.Client) -> None:
    provider = AnthropicProvider("k", http_client=http_client, base_url=_refused_url(), timeout_s=WAIT_S)
    try:
        error = _fails(provider)
    finally:
        provider.close()
    assert error.kind is ErrorKind.RETRYABLE
    assert error.error_type == "connection_error"


def test_a_rejected_key_is_fatal() -> None:
    with AnthropicStubServer(api_key="right") as stub:
        provider = AnthropicProvider("wrong", base_url=stub.url, timeout_s=WAIT_S)  # its own pool
        error = _fails(provider)
        provider.close()
    assert (error.kind, error.status) == (ErrorKind.FATAL, 401)


def test_model_context_window_exceeded_stop_reason_is_a_context_overflow(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    stub.add_reply("partial", stop_reason="model_context_window_exceeded")
    assert _fails(provider).kind is ErrorKind.CONTEXT_OVERFLOW


def test_an_exception_from_on_event_propagates_unclassified(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    def broken(event: StreamEvent) -> None:
        raise KeyError("subscriber bug")

    with pytest.raises(KeyError):
        provider.stream(_request(), broken, CancelToken())


# --- cancellation -----------------------------------------------------------------------------


def test_cancel_from_another_thread_closes_the_stream_and_raises_stream_cancelled(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    # message_start, ping, content_block_start, one text delta, then silence: only
    # closing the socket can wake the worker's blocked read.
    stub.add_fault("stall", after_events=4)
    cancel = CancelToken()
    first_delta: queue.Queue[StreamEvent] = queue.Queue()
    outcome: queue.Queue[BaseException | ModelResponse] = queue.Queue()

    def worker() -> None:
        try:
            outcome.put(provider.stream(_request(), first_delta.put, cancel))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.put(exc)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    assert isinstance(first_delta.get(timeout=WAIT_S), TextDelta)
    cancel.cancel()
    assert isinstance(outcome.get(timeout=WAIT_S), StreamCancelled)
    thread.join(WAIT_S)
    assert stub.wait_for(lambda: stub.disconnects, WAIT_S)
    assert stub.disconnects[0].events_sent == 4


def test_cancel_from_inside_the_callback_stops_the_stream(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    stub.add_reply("word " * 500, delay_s=0.005)
    cancel = CancelToken()
    with pytest.raises(StreamCancelled):
        provider.stream(_request(), lambda event: cancel.cancel(), cancel)
    assert stub.wait_for(lambda: stub.disconnects, WAIT_S)


def test_an_already_cancelled_token_sends_nothing(stub: AnthropicStubServer, provider: AnthropicProvider) -> None:
    cancel = CancelToken()
    cancel.cancel()
    with pytest.raises(StreamCancelled):
        provider.stream(_request(), lambda event: None, cancel)
    assert stub.message_requests == []


def test_streaming_and_cancelling_work_while_time_is_frozen(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    # Simulation tests freeze time; the provider and the stub must not wait on it.
    with freezegun.freeze_time("2030-01-01"):
        stub.add_reply("tick tock", delay_s=0.01)
        assert _stream(provider)[0].text == "tick tock"
        stub.add_fault("stall", after_events=4)
        cancel = CancelToken()
        with pytest.raises(StreamCancelled):
            provider.stream(_request(), lambda event: cancel.cancel(), cancel)
    assert stub.wait_for(lambda: stub.disconnects, WAIT_S)


# --- health and model info --------------------------------------------------------------------


def test_health_is_true_when_the_api_answers_below_500(
    stub: AnthropicStubServer, provider: AnthropicProvider
) -> None:
    stub.add_reply("untouched")
    assert provider.health() is True
    assert stub.requests[-1].json == {}  # the seed's probe: POST {} to /v1/messages
    assert stub.pending_turns == 1


def test_health_is_false_during_an_outage_and_when_refused(
    stub: AnthropicStubServer, provider: AnthropicProvider, http_client: httpx2.Client
) -> None:
    stub.set_outage(529)
    assert provider.health() is False
    stub.set_outage(None)
    assert provider.health() is True
    refused = AnthropicProvider("k", http_client=http_client, base_url=_refused_url(), health_timeout_s=WAIT_S)
    assert refused.health() is False
    refused.close()


def test_model_info_prefers_config_then_the_models_api_then_the_default(http_client: httpx2.Client) -> None:
    with AnthropicStubServer(models={"claude-opus-5-5": 500_000}) as stub:
        provider = AnthropicProvider("k", http_client=http_client, base_url=stub.url,
                                     context_windows={"claude-haiku": 64_000},
                                     default_context_window=100_000, timeout_s=WAIT_S)
        assert provider.model_info("claude-haiku-5-5").context_window == 64_000
        assert provider.model_info("claude-opus-5-5").context_window == 500_000
        assert provider.model_info("unknown-model").context_window == 100_000
        lookups = len(stub.requests)
        assert provider.model_info("claude-opus-5-5").context_window == 500_000  # cached
        assert len(stub.requests) == lookups
        provider.close()


def test_model_info_falls_back_during_an_outage_without_caching_the_fallback(http_client: httpx2.Client) -> None:
    with AnthropicStubServer(models={MODEL: 500_000}) as stub:
        provider = AnthropicProvider("k", http_client=http_client, base_url=stub.url,
                                     default_context_window=123_000,
                                     health_timeout_s=WAIT_S)
        stub.set_outage(503)
        assert provider.model_info(MODEL).context_window == 123_000
        stub.set_outage(None)
        assert provider.model_info(MODEL).context_window == 500_000
        provider.close()
    unreachable = AnthropicProvider("k", http_client=http_client, base_url=_refused_url(),
                                    default_context_window=77_000,
                                    health_timeout_s=WAIT_S)
    assert unreachable.model_info(MODEL).context_window == 77_000
    unreachable.close()


# --- the classifier on its own ----------------------------------------------------------------


def _status_error(status: int, body: dict, headers: dict[str, str] | None = None) -> anthropic.APIStatusError:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    response = httpx2.Response(status, headers=headers or {}, json=body, request=request)
    return anthropic.APIStatusError("boom", response=response, body=body)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx2.ReadError("reset"), ErrorKind.RETRYABLE),
        (httpx2.RemoteProtocolError("peer closed"), ErrorKind.RETRYABLE),
        (httpx2.ReadTimeout("stalled"), ErrorKind.RETRYABLE),
        (httpx2.ConnectError("refused"), ErrorKind.RETRYABLE),
        (anthropic.APIConnectionError(request=httpx2.Request("GET", "http://x")), ErrorKind.RETRYABLE),
        (anthropic.APITimeoutError(request=httpx2.Request("GET", "http://x")), ErrorKind.RETRYABLE),
        (_status_error(408, {"error": {"type": "timeout_error", "message": "t"}}), ErrorKind.RETRYABLE),
        (_status_error(409, {"error": {"type": "conflict", "message": "c"}}), ErrorKind.RETRYABLE),
        (_status_error(503, {"error": {"type": "api_error", "message": "down"}}), ErrorKind.RETRYABLE),
        (_status_error(403, {"error": {"type": "permission_error", "message": "no"}}), ErrorKind.FATAL),
        (_status_error(404, {"error": {"type": "not_found_error", "message": "model"}}), ErrorKind.FATAL),
        (_status_error(413, {"error": {"type": "request_too_large", "message": "big"}}), ErrorKind.CONTEXT_OVERFLOW),
        (_status_error(200, {"type": "error", "error": {"type": "authentication_error", "message": "x"}}),
         ErrorKind.FATAL),
        (ValueError("surprise"), ErrorKind.FATAL),
    ],
)
def test_classifier_table(exc: BaseException, expected: ErrorKind) -> None:
    assert classify_anthropic_error(exc).kind is expected


def test_classifier_reads_an_http_date_retry_after_against_the_date_header() -> None:
    error = _status_error(429, {"error": {"type": "rate_limit_error", "message": "slow down"}},
                          {"retry-after": "Wed, 01 Jan 2031 00:00:30 GMT", "date": "Wed, 01 Jan 2031 00:00:00 GMT"})
    assert classify_anthropic_error(error).retry_after_s == pytest.approx(30.0)


def test_classifier_passes_provider_errors_through() -> None:
    original = ProviderError(ErrorKind.TOOLS_UNSUPPORTED, "no tools")
    assert classify_anthropic_error(original) is original
