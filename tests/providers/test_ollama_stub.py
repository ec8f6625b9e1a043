"""The stub Ollama server, exercised with the real ``ollama`` client over loopback."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import ollama
import pytest

from corvid_actors.testing.ollama_stub import OllamaStubServer, StubModel, Turn, split_chunks

WAIT_S = 1.0
MODEL = "llama3.1:8b"


@pytest.fixture
def stub() -> Iterator[OllamaStubServer]:
    with OllamaStubServer() as server:
        yield server


@pytest.fixture
def client(stub: OllamaStubServer) -> Iterator[ollama.Client]:
    with ollama.Client(host=stub.url, timeout=5.0) as c:
        yield c


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _stream_text(client: ollama.Client, text: str = "hi", model: str = MODEL) -> tuple[str, list]:
    parts = list(client.chat(model=model, messages=_user(text), stream=True))
    return "".join(p.message.content or "" for p in parts), parts


def test_streams_a_scripted_reply_in_chunks_with_a_final_done_line(
    stub: OllamaStubServer, client: ollama.Client
) -> None:
    stub.add_reply("Hello there, friend", chunks=3)
    text, parts = _stream_text(client)
    assert text == "Hello there, friend"
    assert len(parts) == 4
    assert [p.done for p in parts] == [False, False, False, True]
    assert parts[-1].done_reason == "stop"
    assert parts[-1].eval_count == 3 and parts[-1].prompt_eval_count >= 1


def test_non_streaming_chat_returns_one_object(
    stub: OllamaStubServer, client: ollama.Client
) -> None:
    stub.add_tool_calls([("read_file", {"path": "a.py"})], text="Looking")
    response = client.chat(model=MODEL, messages=_user("hi"), stream=False)
    assert response.done and response.message.content == "Looking"
    assert response.message.tool_calls[0].function.name == "read_file"
    assert dict(response.message.tool_calls[0].function.arguments) == {"path": "a.py"}
    assert stub.chat_requests[0].json["stream"] is False


def test_native_tool_calls_stream_in_their_own_chunk(
    stub: OllamaStubServer, client: ollama.Client
) -> None:
    stub.add_tool_calls([("read_file", {"path": "a"}), ("run_command", {"command": "ls"})])
    _, parts = _stream_text(client)
    calls = [c for p in parts for c in (p.message.tool_calls or ())]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("read_file", {"path": "a"}),
        ("run_command", {"command": "ls"}),
    ]
    assert parts[-1].done


def test_unscripted_chats_get_the_default_reply_then_the_responder(
    stub: OllamaStubServer, client: ollama.Client
) -> None:
    assert _stream_text(client)[0] == "ok"
    stub.default_reply = "fallback"
    stub.responder = lambda body: (
        Turn(text="echo: " + body["messages"][-1]["content"])
        if "echo" in body["messages"][-1]["content"]
        else None
    )
    assert _stream_text(client, "echo me")[0] == "echo: echo me"
    assert _stream_text(client, "other")[0] == "fallback"


def test_turns_are_fifo_and_match_selects_by_last_user_message(
    stub: OllamaStubServer, client: ollama.Client
) -> None:
    stub.add_reply("for bob", match="bob")
    stub.add_reply("first")
    stub.add_reply("second")
    stub.add_reply("for alice", match="alice")
    assert _stream_text(client, "hello from alice")[0] == "for alice"  # specific beats generic
    assert _stream_text(client, "anyone")[0] == "first"
    assert _stream_text(client, "alice again")[0] == "second"  # no alice turn left
    assert _stream_text(client, "bob here")[0] == "for bob"
    assert stub.pending_turns == 0


def test_records_every_request_with_body_and_headers(
    stub: OllamaStubServer, client: ollama.Client
) -> None:
    client.chat(
        model=MODEL, messages=_user("hi"), stream=True, options={"num_ctx": 4096}, keep_alive="1m"
    ).__next__()
    client.list()
    recorded = stub.requests
    assert [(r.method, r.path) for r in recorded] == [("POST", "/api/chat"), ("GET", "/api/tags")]
    assert recorded[0].json["options"] == {"num_ctx": 4096}
    assert recorded[0].json["keep_alive"] == "1m"
    assert recorded[0].headers["content-type"] == "application/json"
    assert "ollama-python" in recorded[0].headers["user-agent"]


def test_model_endpoints_serve_the_models_table(
    client: ollama.Client, stub: OllamaStubServer
) -> None:
    names = [m.model for m in client.list().models]
    assert "qwen3:8b" in names and "gemma2:2b" in names
    shown = client.show("qwen3:8b")
    assert shown.details.parameter_size == "8.2B"
    assert shown.modelinfo["qwen3.context_length"] == 40960
    assert "tools" in shown.capabilities and "tools" not in client.show("gemma2:2b").capabilities
    with pytest.raises(ollama.ResponseError) as info:
        client.show("missing:1b")
    assert info.value.status_code == 404
    assert httpx.get(stub.url + "/api/version").json()["version"]


def test_ps_lists_models_after_they_served_a_chat() -> None:
    models = {"big:70b": StubModel("70B", 8192, "llama", size_vram=40 * 2**30)}
    with OllamaStubServer(models) as stub, ollama.Client(host=stub.url) as client:
        assert client.ps().models == []
        list(client.chat(model="big:70b", messages=_user("hi"), stream=True))
        loaded = client.ps().models
        assert [m.model for m in loaded] == ["big:70b"] and loaded[0].size_vram == 40 * 2**30


def test_model_without_tool_support_rejects_tools(client: ollama.Client) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "t",
            "description": "d",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    with pytest.raises(ollama.ResponseError) as info:
        list(client.chat(model="gemma2:2b", messages=_user("hi"), tools=[tool], stream=True))
    assert info.value.status_code == 400 and "does not support tools" in info.value.error
    assert _stream_text(client, model="gemma2:2b")[0] == "ok"  # without tools it chats


def test_strict_models_reject_unknown_models() -> None:
    with OllamaStubServer(strict_models=True) as stub, ollama.Client(host=stub.url) as client:
        with pytest.raises(ollama.ResponseError) as info:
            _stream_text(client, model="nope:1b")
        assert info.value.status_code == 404


@pytest.mark.parametrize(
    ("kind", "status", "text"),
    [
        ("no_tools", 400, "does not support tools"),
        ("http_500", 500, "unexpectedly stopped"),
        ("http_503", 503, "server busy"),
        ("http_429", 429, "too many requests"),
        ("context_length", 400, "context length"),
    ],
)
def test_http_faults_answer_with_status_and_error(
    stub: OllamaStubServer, client: ollama.Client, kind: str, status: int, text: str
) -> None:
    stub.add_fault(kind)
    with pytest.raises(ollama.ResponseError) as info:
        _stream_text(client)
    assert info.value.status_code == status and text in info.value.error
    assert _stream_text(client)[0] == "ok"  # the fault was used up


def test_fault_after_chunks_is_an_in_stream_error_line(
    stub: OllamaStubServer, client: ollama.Client
) -> None:
    stub.add_fault("http_500", after_chunks=2, text="a b c d")
    seen: list[str] = []
    with pytest.raises(ollama.ResponseError) as info:
        for part in client.chat(model=MODEL, messages=_user("hi"), stream=True):
            seen.append(part.message.content)
    assert seen == ["a ", "b "]
    assert info.value.status_code == -1  # the client's in-stream errors carry no status


def test_drop_mid_stream_closes_without_the_terminating_chunk(
    stub: OllamaStubServer, client: ollama.Client
) -> None:
    stub.add_fault("drop_mid_stream", after_chunks=2)
    seen: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        for part in client.chat(model=MODEL, messages=_user("hi"), stream=True):
            seen.append(part.message.content)
    assert len(seen) == 2
    assert stub.disconnects == 0  # the server dropped it, the client did not hang up


def test_drop_with_reset_surfaces_as_read_error(
    stub: OllamaStubServer, client: ollama.Client
) -> None:
    stub.add_fault("drop_mid_stream", after_chunks=1, reset=True)
    with pytest.raises(httpx.ReadError):
        _stream_text(client)


def test_slow_fault_delays_every_chunk(stub: OllamaStubServer, client: ollama.Client) -> None:
    turn = stub.add_fault("slow", text="x y")
    assert turn.delay_s > 0
    assert _stream_text(client)[0] == "x y"


def test_client_closing_the_stream_is_recorded_as_a_disconnect(
    stub: OllamaStubServer, client: ollama.Client
) -> None:
    stub.add_reply(" ".join(["w"] * 200), delay_s=0.01)
    stream = client.chat(model=MODEL, messages=_user("hi"), stream=True)
    next(stream)
    assert stub.active_streams == 1
    stream.close()  # closing the generator closes the HTTP response
    assert stub.wait_for(lambda: stub.disconnects == 1 and stub.active_streams == 0, WAIT_S)
    assert stub.completed_streams == 0


def test_wait_for_gives_up_after_its_timeout(stub: OllamaStubServer) -> None:
    assert stub.wait_for(lambda: False, timeout_s=0.05) is False


def test_stop_cuts_a_stream_in_progress_without_counting_a_disconnect() -> None:
    stub = OllamaStubServer().start()
    stub.add_reply("never finished", delay_s=30)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            with ollama.Client(host=stub.url) as c:
                _stream_text(c)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    assert stub.wait_for(lambda: stub.active_streams == 1, WAIT_S)
    stub.stop()
    reader.join(WAIT_S)
    assert not reader.is_alive()
    assert len(errors) == 1 and stub.disconnects == 0


def test_unknown_fault_kind_is_refused(stub: OllamaStubServer) -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        stub.add_fault("meteor")


def test_unknown_path_is_404(stub: OllamaStubServer) -> None:
    assert httpx.post(stub.url + "/api/nope").status_code == 404
    assert httpx.get(stub.url + "/").text == "Ollama is running"


@pytest.mark.parametrize(
    ("text", "chunks", "expected"),
    [
        ("a b c", None, ["a ", "b ", "c"]),
        ("abcdef", 3, ["ab", "cd", "ef"]),
        ("abcde", 2, ["abc", "de"]),
        ("ab", 5, ["a", "b"]),
        ("", None, []),
    ],
)
def test_split_chunks(text: str, chunks: int | None, expected: list[str]) -> None:
    assert split_chunks(text, chunks) == expected


def test_stream_absent_means_stream(stub: OllamaStubServer) -> None:
    stub.add_reply("a b")
    response = httpx.post(stub.url + "/api/chat", json={"model": MODEL, "messages": _user("hi")})
    assert response.headers["content-type"] == "application/x-ndjson"
    lines = [line for line in response.text.splitlines() if line]
    assert len(lines) == 3 and '"done": true' in lines[-1]


def test_concurrent_conversations_are_scripted_independently(stub: OllamaStubServer) -> None:
    for who in ("alice", "bob", "carol"):
        stub.add_reply(f"hello {who}", match=who, delay_s=0.01)
    results: dict[str, str] = {}

    def converse(who: str) -> None:
        with ollama.Client(host=stub.url) as c:
            results[who] = _stream_text(c, f"I am {who}")[0]

    threads = [threading.Thread(target=converse, args=(who,)) for who in ("carol", "alice", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert results == {who: f"hello {who}" for who in ("alice", "bob", "carol")}
