"""The stub Anthropic server, exercised through the real ``anthropic`` SDK (loopback only)."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message

import anthropic
import freezegun
import httpx2
import pytest

from corvid_actors.testing.anthropic_stub import AnthropicStubServer

MODEL = "claude-sonnet-5-5"
USER = [{"role": "user", "content": "hello"}]
WAIT_S = 1.0


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
def client(stub: AnthropicStubServer, http_client: httpx2.Client) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test-key", base_url=stub.url, max_retries=0, timeout=5.0,
                               http_client=http_client)


def _raw_post(url: str, body: dict, headers: dict[str, str]) -> tuple[int, Message, bytes]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def _stream_events(client: anthropic.Anthropic, **extra: object) -> list:
    with client.messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True, **extra) as stream:
        return list(stream)


# --- the wire protocol ----------------------------------------------------------------


def test_streamed_reply_is_the_full_sse_sequence_with_event_lines_and_ping(stub: AnthropicStubServer) -> None:
    stub.add_reply("one two three", chunks=3)
    status, headers, raw = _raw_post(
        f"{stub.url}/v1/messages", {"model": MODEL, "max_tokens": 8, "messages": USER, "stream": True},
        {"x-api-key": "k"})
    names = [line[len("event: "):] for line in raw.decode().splitlines() if line.startswith("event: ")]
    data_lines = [line for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert status == 200
    assert headers.get("content-type", "").startswith("text/event-stream")
    assert headers.get("transfer-encoding") == "chunked"
    assert headers.get("request-id", "").startswith("req_")
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta",
                     "content_block_delta", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    assert len(data_lines) == len(names)  # every data line has its event line


def test_sdk_reads_streamed_text_deltas_stop_reason_and_cumulative_usage(
    stub: AnthropicStubServer, client: anthropic.Anthropic
) -> None:
    stub.add_reply("Hello there", usage={"input_tokens": 11, "output_tokens": 7})
    events = _stream_events(client)
    deltas = [e.delta.text for e in events if e.type == "content_block_delta"]
    final = [e for e in events if e.type == "message_delta"][0]
    assert deltas == ["Hello ", "there"]
    assert final.delta.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (11, 7)
    assert events[0].message.usage.input_tokens == 11


def test_several_tool_calls_with_arguments_split_across_input_json_deltas(
    stub: AnthropicStubServer, client: anthropic.Anthropic
) -> None:
    stub.add_tool_use([("read_file", {"path": "src/a.py"}), ("list_files", {"dir": "."})],
                      text="Looking.", split_into=4)
    events = _stream_events(client)
    starts = [e for e in events if e.type == "content_block_start"]
    json_deltas: dict[int, list[str]] = {}
    for e in events:
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            json_deltas.setdefault(e.index, []).append(e.delta.partial_json)
    assert [s.content_block.type for s in starts] == ["text", "tool_use", "tool_use"]
    assert [s.index for s in starts] == [0, 1, 2]
    assert starts[1].content_block.id != starts[2].content_block.id
    assert len(json_deltas[1]) == 1 + 4  # an empty first delta, like the API, then 4 pieces
    assert json.loads("".join(json_deltas[1])) == {"path": "src/a.py"}
    assert json.loads("".join(json_deltas[2])) == {"dir": "."}
    assert [e for e in events if e.type == "message_delta"][0].delta.stop_reason == "tool_use"


def test_non_streamed_reply_is_a_message_with_text_and_tool_use(
    stub: AnthropicStubServer, client: anthropic.Anthropic
) -> None:
    stub.add_tool_use([("run_command", {"command": "ls"})], text="Running it")
    message = client.messages.create(model=MODEL, max_tokens=64, messages=USER)
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"command": "ls"}
    assert message.stop_reason == "tool_use"


def test_count_tokens_and_model_lookup(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(model=MODEL, messages=USER)
    assert counted.input_tokens > 0
    assert client.models.retrieve(MODEL).max_input_tokens == 200_000
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("no-such-model")


# --- auth and recording -------------------------------------------------------------------


def test_accepts_x_api_key_and_bearer_and_rejects_missing_auth(
    stub: AnthropicStubServer, client: anthropic.Anthropic
) -> None:
    body = {"model": MODEL, "max_tokens": 8, "messages": USER}
    assert _raw_post(f"{stub.url}/v1/messages", body, {"x-api-key": "k"})[0] == 200
    assert _raw_post(f"{stub.url}/v1/messages", body, {"Authorization": "Bearer k"})[0] == 200
    status, _, raw = _raw_post(f"{stub.url}/v1/messages", body, {})
    assert status == 401
    assert json.loads(raw)["error"]["type"] == "authentication_error"
    client.messages.create(model=MODEL, max_tokens=8, messages=USER)  # the SDK sends Bearer
    assert stub.requests[-1].headers["authorization"] == "Bearer test-key"


def test_a_configured_key_must_match() -> None:
    with AnthropicStubServer(api_key="right") as stub, anthropic.Anthropic(
        api_key="wrong", base_url=stub.url, max_retries=0, timeout=5.0
    ) as client, pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model=MODEL, max_tokens=8, messages=USER)


def test_records_path_headers_and_json_of_every_request(
    stub: AnthropicStubServer, client: anthropic.Anthropic
) -> None:
    client.messages.create(model=MODEL, max_tokens=8, messages=USER, system="be brief")
    recorded = stub.message_requests[-1]
    assert recorded.path == "/v1/messages"
    assert recorded.json["system"] == "be brief"
    assert recorded.user_text == "hello"
    assert "anthropic-version" in recorded.headers


# --- scripting ------------------------------------------------------------------------------


def test_turns_are_fifo_among_matches_with_default_reply_otherwise(
    stub: AnthropicStubServer, client: anthropic.Anthropic
) -> None:
    stub.default_reply = "fallback"
    stub.add_reply("for deploy", match="deploy")
    stub.add_reply("first general")

    def ask(text: str) -> str:
        reply = client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": text}])
        return reply.content[0].text

    assert ask("what now?") == "first general"
    assert ask("please deploy it") == "for deploy"
    assert ask("anything") == "fallback"
    assert stub.pending_turns == 0


def test_health_probe_post_empty_body_is_400_and_consumes_no_turn(stub: AnthropicStubServer) -> None:
    stub.add_reply("kept")
    status, _, raw = _raw_post(f"{stub.url}/v1/messages", {}, {"x-api-key": "k"})
    assert status == 400
    assert json.loads(raw)["error"]["type"] == "invalid_request_error"
    assert stub.pending_turns == 1


# --- faults ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "exc_type", "status", "error_type"),
    [
        ("http_429", anthropic.RateLimitError, 429, "rate_limit_error"),
        ("http_500", anthropic.InternalServerError, 500, "api_error"),
        ("http_529", anthropic.OverloadedError, 529, "overloaded_error"),
        ("http_401", anthropic.AuthenticationError, 401, "authentication_error"),
        ("http_400", anthropic.BadRequestError, 400, "invalid_request_error"),
        ("context_overflow", anthropic.BadRequestError, 400, "invalid_request_error"),
    ],
)
def test_http_faults_answer_their_status_and_error_type(
    stub: AnthropicStubServer, client: anthropic.Anthropic, kind: str, exc_type: type, status: int,
    error_type: str,
) -> None:
    stub.add_fault(kind)
    with pytest.raises(exc_type) as caught:
        _stream_events(client)
    assert caught.value.status_code == status
    assert caught.value.type == error_type


def test_retry_after_headers_are_sent(stub: AnthropicStubServer, client: anthropic.Anthropic) -> None:
    stub.add_fault("http_429", retry_after_s=7, retry_after_ms=250)
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.response.headers["retry-after-ms"] == "250"


def test_in_stream_error_event_after_some_events(stub: AnthropicStubServer, client: anthropic.Anthropic) -> None:
    stub.add_fault("stream_error", error_type="api_error", after_events=3)
    seen = []
    with pytest.raises(anthropic.APIStatusError) as caught, client.messages.create(
        model=MODEL, max_tokens=8, messages=USER, stream=True
    ) as stream:
        seen.extend(e.type for e in stream)
    assert seen == ["message_start", "content_block_start"]  # the ping is not surfaced
    assert caught.value.status_code == 200
    assert caught.value.type == "api_error"


def test_drop_closes_the_socket_mid_stream(stub: AnthropicStubServer, client: anthropic.Anthropic) -> None:
    stub.add_fault("drop", after_events=2)
    with pytest.raises(httpx2.RemoteProtocolError):
        _stream_events(client)
    assert client.messages.create(model=MODEL, max_tokens=8, messages=USER).content[0].text == "OK"


def test_outage_answers_every_messages_request_until_cleared(
    stub: AnthropicStubServer, client: anthropic.Anthropic
) -> None:
    stub.add_reply("after the outage")
    stub.set_outage(529)
    with pytest.raises(anthropic.OverloadedError):
        client.messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert _raw_post(f"{stub.url}/v1/messages", {}, {"x-api-key": "k"})[0] == 529
    with pytest.raises(anthropic.OverloadedError):
        client.models.retrieve(MODEL)
    stub.set_outage(None)
    assert client.messages.create(model=MODEL, max_tokens=8, messages=USER).content[0].text == "after the outage"


def test_client_closing_a_slow_stream_is_recorded_as_a_disconnect(
    stub: AnthropicStubServer, client: anthropic.Anthropic
) -> None:
    stub.add_fault("slow", delay_s=0.02, text="word " * 200)
    with client.messages.create(model=MODEL, max_tokens=8, messages=USER, stream=True) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                break
    assert stub.wait_for(lambda: stub.disconnects, WAIT_S)
    assert stub.disconnects[0].request_index == len(stub.requests) - 1
    assert 3 <= stub.disconnects[0].events_sent < 200


# --- lifecycle and time ---------------------------------------------------------------------


def test_wait_for_is_bounded_and_uses_real_time_under_freezegun(stub: AnthropicStubServer) -> None:
    with freezegun.freeze_time("2030-01-01"):
        assert stub.wait_for(lambda: stub.disconnects, 0.05) is False
        stub.add_reply("frozen", delay_s=0.01)
        status, _, raw = _raw_post(f"{stub.url}/v1/messages",
                                   {"model": MODEL, "max_tokens": 8, "messages": USER}, {"x-api-key": "k"})
    assert status == 200
    assert json.loads(raw)["content"][0]["text"] == "frozen"


def test_close_stops_listening_even_with_a_keep_alive_connection_open() -> None:
    stub = AnthropicStubServer().start()
    url = stub.url
    client = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0, timeout=5.0)
    client.messages.create(model=MODEL, max_tokens=8, messages=USER)  # leaves a pooled connection
    stub.close()
    client.close()
    port = int(url.rsplit(":", 1)[1])
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=WAIT_S):
        pass
