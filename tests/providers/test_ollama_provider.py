"""OllamaProvider with the real ``ollama`` client against the stub server over loopback."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import freezegun
import httpx
import ollama
import pytest

from corvid_actors.core.vocabulary import CancelToken, StreamCancelled, ToolSpec
from corvid_actors.providers.base import (
    ChatMessage,
    ErrorKind,
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderError,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallStarted,
)
from corvid_actors.providers.ollama import (
    OllamaProvider,
    classify_ollama_error,
    parse_parameter_size,
)
from corvid_actors.providers.text_tools import TOOL_OUTPUT_CLOSE, TOOL_OUTPUT_OPEN
from corvid_actors.testing.ollama_stub import OllamaStubServer, Turn, split_chunks

WAIT_S = 1.0
NATIVE = "llama3.1:8b"
TEXT = "qwen3:8b"
READ = ToolSpec(
    "read_file",
    "Read a file",
    {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "file"}},
        "required": ["path"],
    },
)
RUN = ToolSpec(
    "run_command",
    "Run a command",
    {"type": "object", "properties": {"command": {"type": "string"}}},
)


@pytest.fixture
def stub() -> Iterator[OllamaStubServer]:
    with OllamaStubServer() as server:
        yield server


@pytest.fixture
def provider(stub: OllamaStubServer) -> OllamaProvider:
    return OllamaProvider(stub.url, request_timeout_s=5.0)


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _request(
    model: str = NATIVE, *messages: ChatMessage, tools: tuple[ToolSpec, ...] = (), **kw
) -> ModelRequest:
    return ModelRequest(
        model=model,
        system="You are terse.",
        messages=messages or (ChatMessage("user", "hi"),),
        tools=tools,
        **kw,
    )


def _run(
    provider: OllamaProvider, request: ModelRequest
) -> tuple[ModelResponse, list[StreamEvent]]:
    events: list[StreamEvent] = []
    return provider.stream(request, events.append, CancelToken()), events


def _failure(provider: OllamaProvider, request: ModelRequest | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        _run(provider, request or _request())
    return info.value


def _deltas(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_is_a_provider(provider: OllamaProvider) -> None:
    assert isinstance(provider, Provider) and provider.name == "ollama"


# --- streaming -------------------------------------------------------------------------


def test_streams_text_deltas_and_returns_the_whole_reply(
    stub: OllamaStubServer, provider: OllamaProvider
) -> None:
    stub.add_reply("The answer is 42.", chunks=4)
    response, events = _run(provider, _request())
    assert [e.text for e in events if isinstance(e, TextDelta)] == split_chunks(
        "The answer is 42.", 4
    )
    assert response.text == "The answer is 42."
    assert response.tool_calls == () and response.stop_reason == "stop"
    assert response.usage.output_tokens == 4 and response.usage.input_tokens > 0
    assert response.model == NATIVE


def test_a_reply_only_in_the_thinking_channel_becomes_the_text(
    stub: OllamaStubServer, provider: OllamaProvider
) -> None:
    stub.add_turn(Turn(thinking="The answer is 4."))
    response, events = _run(provider, _request())
    assert response.text == "The answer is 4." and _deltas(events) == "The answer is 4."
    stub.add_turn(Turn(text="4", thinking="2 + 2 = 4"))
    assert _run(provider, _request())[0].text == "4"  # thinking is not shown when text exists


def test_sends_options_keep_alive_and_the_system_prompt(stub: OllamaStubServer) -> None:
    provider = OllamaProvider(stub.url, num_ctx=16384, num_predict=512, keep_alive="30m")
    _run(provider, _request())
    _run(provider, _request(max_tokens=99))
    first, second = (r.json for r in stub.chat_requests)
    assert first["options"] == {"num_ctx": 16384, "num_predict": 512}
    assert first["keep_alive"] == "30m" and first["stream"] is True
    assert first["messages"][0] == {"role": "system", "content": "You are terse."}
    assert second["options"]["num_predict"] == 99


def test_keep_alive_none_is_left_to_the_server(stub: OllamaStubServer) -> None:
    _run(OllamaProvider(stub.url, keep_alive=None), _request())
    assert "keep_alive" not in stub.chat_requests[0].json


def test_native_tool_calls_get_ids_and_stop_reason_tool_use(
    stub: OllamaStubServer, provider: OllamaProvider
) -> None:
    stub.add_tool_calls(
        [("read_file", {"file_path": "a.py"}), ("run_command", {"command": "ls"})], text="Looking."
    )
    response, events = _run(provider, _request(tools=(READ, RUN)))
    assert response.tool_calls == (
        ToolCall("call_0", "read_file", {"path": "a.py"}),
        ToolCall("call_1", "run_command", {"command": "ls"}),
    )
    assert response.stop_reason == "tool_use" and response.text == "Looking."
    assert [e for e in events if isinstance(e, ToolCallStarted)] == [
        ToolCallStarted("call_0", "read_file"),
        ToolCallStarted("call_1", "run_command"),
    ]
    sent = stub.chat_requests[0].json["tools"]
    assert [t["function"]["name"] for t in sent] == ["read_file", "run_command"]
    assert sent[0]["function"]["parameters"]["required"] == ["path"]
    assert sent[0]["function"]["parameters"]["properties"]["path"] == {
        "type": "string",
        "description": "file",
    }


def test_native_history_sends_tool_calls_and_tool_results_by_name(
    stub: OllamaStubServer, provider: OllamaProvider
) -> None:
    history = (
        ChatMessage("user", "read a.py"),
        ChatMessage(
            "assistant", "", tool_calls=(ToolCall("call_0", "read_file", {"path": "a.py"}),)
        ),
        ChatMessage("tool", "print('hi')", tool_call_id="call_0", tool_name="read_file"),
    )
    _run(provider, _request(NATIVE, *history, tools=(READ,)))
    messages = stub.chat_requests[0].json["messages"]
    assert messages[2]["role"] == "assistant"
    assert messages[2]["tool_calls"] == [
        {"function": {"name": "read_file", "arguments": {"path": "a.py"}}}
    ]
    assert messages[3] == {"role": "tool", "content": "print('hi')", "tool_name": "read_file"}


# --- text-based tool calling -----------------------------------------------------------


def test_text_tools_round_trip(stub: OllamaStubServer, provider: OllamaProvider) -> None:
    stub.add_reply(
        'I will read both.\n```json\n[{"name": "read_file", "arguments": {"filename": "a.py"}}, '
        '{"name": "read_file", "arguments": {"path": "b.py"}}]\n```',
        chunks=6,
    )
    response, events = _run(provider, _request(TEXT, tools=(READ, RUN)))
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_0", "read_file", {"path": "a.py"}),
        ("call_1", "read_file", {"path": "b.py"}),
    ]
    assert response.text == "I will read both." and response.stop_reason == "tool_use"
    assert _deltas(events).strip() == "I will read both."  # the call text never streams
    first = stub.chat_requests[0].json
    assert not first.get("tools")
    assert (
        "read_file" in first["messages"][0]["content"]
        and "JSON array" in first["messages"][0]["content"]
    )

    stub.add_reply("a.py prints hi; b.py is empty.")
    history = (
        ChatMessage("user", "read them"),
        ChatMessage("assistant", response.text, tool_calls=response.tool_calls),
        ChatMessage("tool", "print('hi')", tool_call_id="call_0", tool_name="read_file"),
        ChatMessage("tool", "", tool_call_id="call_1", tool_name="read_file", is_error=True),
    )
    final, _ = _run(provider, _request(TEXT, *history, tools=(READ, RUN)))
    assert final.text == "a.py prints hi; b.py is empty." and final.tool_calls == ()
    messages = stub.chat_requests[1].json["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert '"name": "read_file"' in messages[2]["content"]
    results = messages[3]["content"]
    assert results.count(TOOL_OUTPUT_OPEN) == 2 and results.count(TOOL_OUTPUT_CLOSE) == 2
    assert "print('hi')" in results and "read_file failed" in results


def test_text_tools_accept_tag_and_call_syntax(
    stub: OllamaStubServer, provider: OllamaProvider
) -> None:
    stub.add_reply(
        '<tool_call>{"name": "run_command", "arguments": {"command": "make"}}</tool_call>'
    )
    response, _ = _run(provider, _request(TEXT, tools=(READ, RUN)))
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("run_command", {"command": "make"})
    ]
    stub.add_reply('read_file({"path": "x"})')
    response, _ = _run(provider, _request(TEXT, tools=(READ, RUN)))
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("read_file", {"path": "x"})]


def test_cloud_models_always_use_text_tools(
    stub: OllamaStubServer, provider: OllamaProvider
) -> None:
    _run(provider, _request("gpt-oss:120b-cloud", tools=(READ,)))
    assert not stub.chat_requests[0].json.get("tools")
    assert provider.uses_text_tools("llama3.1:cloud") and not provider.uses_text_tools(NATIVE)


def test_text_tool_families_are_configurable(stub: OllamaStubServer) -> None:
    provider = OllamaProvider(stub.url, text_tool_families=("llama",))
    _run(provider, _request(NATIVE, tools=(READ,)))
    _run(provider, _request(TEXT, tools=(READ,)))
    llama, qwen = (r.json for r in stub.chat_requests)
    assert not llama.get("tools") and qwen["tools"]


def test_text_model_without_tools_gets_no_instructions(
    stub: OllamaStubServer, provider: OllamaProvider
) -> None:
    stub.add_reply('{"name": "read_file", "arguments": {}}')
    response, _ = _run(provider, _request(TEXT))
    assert response.tool_calls == ()
    assert stub.chat_requests[0].json["messages"][0]["content"] == "You are terse."


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "options", "kind", "status"),
    [
        ("no_tools", {}, ErrorKind.TOOLS_UNSUPPORTED, 400),
        ("http_500", {}, ErrorKind.RETRYABLE, 500),
        ("http_503", {}, ErrorKind.RETRYABLE, 503),
        ("http_429", {}, ErrorKind.RETRYABLE, 429),
        ("context_length", {}, ErrorKind.CONTEXT_OVERFLOW, 400),
        ("drop_mid_stream", {"after_chunks": 2}, ErrorKind.RETRYABLE, None),
        ("drop_mid_stream", {"after_chunks": 1, "reset": True}, ErrorKind.RETRYABLE, None),
        ("drop_mid_stream", {"after_chunks": 0}, ErrorKind.RETRYABLE, None),
        ("http_500", {"after_chunks": 1}, ErrorKind.RETRYABLE, None),
        ("context_length", {"after_chunks": 1}, ErrorKind.CONTEXT_OVERFLOW, None),
        ("http_500", {"status": 401, "error": "unauthorized"}, ErrorKind.FATAL, 401),
    ],
)
def test_stub_faults_are_classified(
    stub: OllamaStubServer,
    provider: OllamaProvider,
    fault: str,
    options: dict,
    kind: ErrorKind,
    status: int | None,
) -> None:
    stub.add_fault(fault, **options)
    error = _failure(provider)
    assert error.kind is kind and error.status == status
    assert isinstance(error.__cause__, Exception)


def test_model_without_tool_support_is_tools_unsupported(provider: OllamaProvider) -> None:
    error = _failure(provider, _request("gemma2:2b", tools=(READ,)))
    assert error.kind is ErrorKind.TOOLS_UNSUPPORTED


def test_refused_connection_is_retryable() -> None:
    provider = OllamaProvider(_closed_port_url())
    error = _failure(provider)
    assert error.kind is ErrorKind.RETRYABLE
    assert isinstance(error.__cause__, httpx.ConnectError)  # the client's streaming path
    assert provider.health() is False
    with pytest.raises(ProviderError) as listed:
        provider.list_models()
    assert listed.value.kind is ErrorKind.RETRYABLE
    assert provider.model_info(NATIVE).context_window == provider.num_ctx


def test_a_stalled_stream_times_out_as_retryable(stub: OllamaStubServer) -> None:
    stub.add_reply("late", delay_s=5.0)
    error = _failure(OllamaProvider(stub.url, request_timeout_s=0.1))
    assert error.kind is ErrorKind.RETRYABLE and isinstance(error.__cause__, httpx.ReadTimeout)


def _response_error(text: str, status: int = -1) -> ollama.ResponseError:
    return ollama.ResponseError(text, status)


_REQ = httpx.Request("POST", "http://127.0.0.1:1/api/chat")


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (_response_error("llama3 does not support tools", 400), ErrorKind.TOOLS_UNSUPPORTED),
        (
            _response_error("tool use is not supported by this model", 400),
            ErrorKind.TOOLS_UNSUPPORTED,
        ),
        (
            _response_error("input length exceeds the context length", 400),
            ErrorKind.CONTEXT_OVERFLOW,
        ),
        (
            _response_error('{"error": "prompt is too long: 9000 tokens"}', 400),
            ErrorKind.CONTEXT_OVERFLOW,
        ),
        (_response_error("maximum context length is 8192 tokens"), ErrorKind.CONTEXT_OVERFLOW),
        (_response_error("internal server error", 500), ErrorKind.RETRYABLE),
        (_response_error("bad gateway", 502), ErrorKind.RETRYABLE),
        (_response_error("server busy, please try again", 503), ErrorKind.RETRYABLE),
        (_response_error("slow down", 429), ErrorKind.RETRYABLE),
        (_response_error("request timeout", 408), ErrorKind.RETRYABLE),
        (_response_error("upstream timed out after 60 seconds"), ErrorKind.RETRYABLE),
        (_response_error("api request returned none"), ErrorKind.RETRYABLE),
        (_response_error("unauthorized", 401), ErrorKind.FATAL),
        (_response_error('model "x" not found, try pulling it first', 404), ErrorKind.FATAL),
        (_response_error("invalid options"), ErrorKind.FATAL),
        (ConnectionError("Failed to connect to Ollama"), ErrorKind.RETRYABLE),
        (ConnectionResetError(104, "Connection reset by peer"), ErrorKind.RETRYABLE),
        (TimeoutError("timed out"), ErrorKind.RETRYABLE),
        (httpx.ConnectError("refused", request=_REQ), ErrorKind.RETRYABLE),
        (httpx.ReadError("reset", request=_REQ), ErrorKind.RETRYABLE),
        (httpx.RemoteProtocolError("peer closed", request=_REQ), ErrorKind.RETRYABLE),
        (httpx.ReadTimeout("read", request=_REQ), ErrorKind.RETRYABLE),
        (httpx.ConnectTimeout("connect", request=_REQ), ErrorKind.RETRYABLE),
        (httpx.UnsupportedProtocol("ftp://", request=_REQ), ErrorKind.FATAL),
        (ollama.RequestError("must provide a model"), ErrorKind.FATAL),
        (ValueError("Expecting value: line 1 column 1"), ErrorKind.FATAL),
    ],
)
def test_classify_ollama_error(exc: BaseException, kind: ErrorKind) -> None:
    error = classify_ollama_error(exc)
    assert isinstance(error, ProviderError) and error.kind is kind


def test_classify_keeps_status_and_passes_provider_errors_through() -> None:
    assert classify_ollama_error(_response_error("boom", 503)).status == 503
    assert classify_ollama_error(_response_error("boom")).status is None
    original = ProviderError(ErrorKind.FATAL, "x")
    assert classify_ollama_error(original) is original


# --- cancellation ----------------------------------------------------------------------


def _stream_in_thread(
    provider: OllamaProvider, request: ModelRequest, cancel: CancelToken, on_event=None
):
    outcome: dict[str, BaseException | ModelResponse] = {}

    def run() -> None:
        try:
            outcome["result"] = provider.stream(request, on_event or (lambda e: None), cancel)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["result"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_cancel_mid_stream_closes_the_http_stream(
    stub: OllamaStubServer, provider: OllamaProvider
) -> None:
    stub.add_reply(" ".join(f"w{i}" for i in range(500)), delay_s=0.01)
    first_delta = threading.Event()
    cancel = CancelToken()
    thread, outcome = _stream_in_thread(provider, _request(), cancel, lambda e: first_delta.set())
    assert first_delta.wait(WAIT_S)
    cancel.cancel()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert isinstance(outcome["result"], StreamCancelled)
    assert stub.wait_for(lambda: stub.disconnects == 1 and stub.active_streams == 0, WAIT_S)
    assert stub.completed_streams == 0


def test_cancel_unblocks_a_stream_that_sends_nothing(
    stub: OllamaStubServer, provider: OllamaProvider
) -> None:
    stub.add_reply("never", delay_s=30.0)
    cancel = CancelToken()
    thread, outcome = _stream_in_thread(provider, _request(), cancel)
    assert stub.wait_for(lambda: stub.active_streams == 1, WAIT_S)
    cancel.cancel()
    thread.join(WAIT_S)
    assert not thread.is_alive() and isinstance(outcome["result"], StreamCancelled)
    assert stub.wait_for(lambda: stub.disconnects == 1, WAIT_S)


def test_cancelled_token_sends_no_request(stub: OllamaStubServer, provider: OllamaProvider) -> None:
    cancel = CancelToken()
    cancel.cancel()
    with pytest.raises(StreamCancelled):
        provider.stream(_request(), lambda e: None, cancel)
    assert stub.chat_requests == []


def test_streaming_works_while_time_is_frozen(
    stub: OllamaStubServer, provider: OllamaProvider
) -> None:
    stub.add_reply("a b c", delay_s=0.01)
    with freezegun.freeze_time("2030-01-01"):
        response, _ = _run(provider, _request())
        assert stub.wait_for(lambda: stub.completed_streams == 1, WAIT_S)
    assert response.text == "a b c"


# --- probes ----------------------------------------------------------------------------


def test_health_follows_the_server(stub: OllamaStubServer, provider: OllamaProvider) -> None:
    assert provider.health() is True
    stub.stop()
    assert provider.health() is False


@pytest.mark.parametrize(("status", "healthy"), [(401, True), (404, True), (429, True), (500, False), (503, False)])
def test_health_probe_answering_4xx_is_healthy_and_5xx_is_not(stub: OllamaStubServer, provider: OllamaProvider,
                                                              status: int, healthy: bool) -> None:
    stub.tags_status = status
    assert provider.health() is healthy
    assert [r.path for r in stub.requests][-1] == "/api/tags"


def test_model_info_from_show_is_capped_by_num_ctx_and_cached(stub: OllamaStubServer) -> None:
    provider = OllamaProvider(stub.url, num_ctx=8192)
    info = provider.model_info("qwen2.5-coder:14b")
    assert info.context_window == 8192 and info.parameter_size_b == pytest.approx(14.8)
    provider.model_info("qwen2.5-coder:14b")
    assert len([r for r in stub.requests if r.path == "/api/show"]) == 1
    small = OllamaProvider(stub.url, num_ctx=65536).model_info("gemma2:2b")
    assert small.context_window == 8192 and small.parameter_size_b == pytest.approx(2.6)
    assert OllamaProvider(stub.url).model_info("qwen2.5:0.5b").parameter_size_b == pytest.approx(
        0.494, abs=1e-3
    )


def test_model_info_falls_back_to_num_ctx_and_retries_later(stub: OllamaStubServer) -> None:
    provider = OllamaProvider(stub.url, num_ctx=4096)
    info = provider.model_info("unknown:7b")
    assert info.context_window == 4096 and info.parameter_size_b is None
    provider.model_info("unknown:7b")
    assert len([r for r in stub.requests if r.path == "/api/show"]) == 2


def test_list_models_and_loaded_vram(stub: OllamaStubServer, provider: OllamaProvider) -> None:
    assert set(provider.list_models()) == set(stub.models)
    assert provider.loaded_vram_bytes() == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("14.8B", 14.8),
        ("7B", 7.0),
        ("500M", 0.5),
        ("1.5T", 1500.0),
        ("8b", 8.0),
        ("", None),
        ("big", None),
        (None, None),
    ],
)
def test_parse_parameter_size(text: str | None, expected: float | None) -> None:
    assert parse_parameter_size(text) == (pytest.approx(expected) if expected is not None else None)
