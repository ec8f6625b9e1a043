"""The stub model servers record every request for tests, and only a bounded ring when a
long-running host asks for one (the daemon's built-in stub: issue 21)."""

from __future__ import annotations

import anthropic
import ollama
import pytest

from corvid_actors.config import Config
from corvid_actors.daemon.model_server import STUB_KEPT_REQUESTS, start_stub
from corvid_actors.testing.anthropic_stub import AnthropicStubServer
from corvid_actors.testing.ollama_stub import OllamaStubServer

MODEL = "llama3.1:8b"
CLAUDE = "claude-sonnet-5-5"


def _chat(client: ollama.Client, text: str) -> str:
    parts = client.chat(model=MODEL, messages=[{"role": "user", "content": text}], stream=True)
    return "".join(p.message.content or "" for p in parts)


def test_the_ollama_stub_keeps_every_request_unless_bounded():
    with OllamaStubServer() as everything, OllamaStubServer(keep_requests=3) as ring:
        for stub in (everything, ring):
            with ollama.Client(host=stub.url, timeout=5.0) as client:
                for n in range(7):
                    _chat(client, f"message {n}")
        assert len(everything.chat_requests) == 7
        kept = [r.json["messages"][-1]["content"] for r in ring.chat_requests]
        assert kept == ["message 4", "message 5", "message 6"]
        # the counters still count everything (the server counts a stream after the client
        # has read its last chunk: wait for it, bounded)
        assert ring.wait_for(lambda: ring.completed_streams == 7, timeout_s=5.0), ring.completed_streams


def test_an_ollama_stub_that_keeps_nothing_still_serves():
    with OllamaStubServer(keep_requests=0, default_reply="fine") as stub, \
            ollama.Client(host=stub.url, timeout=5.0) as client:
        assert _chat(client, "hi") == "fine"
        assert stub.requests == []


def test_the_anthropic_stub_keeps_a_bounded_ring_and_counts_every_request():
    with AnthropicStubServer(keep_requests=2) as stub:
        client = anthropic.Anthropic(api_key="k", base_url=stub.url, max_retries=0)
        for n in range(5):
            client.messages.create(model=CLAUDE, max_tokens=8, messages=[{"role": "user", "content": f"m{n}"}])
        assert [r.user_text for r in stub.message_requests] == ["m3", "m4"]
        # request ids keep counting past the ring
        raw = client.messages.with_raw_response.create(model=CLAUDE, max_tokens=8,
                                                       messages=[{"role": "user", "content": "m5"}])
        assert raw.headers["request-id"] == "req_stub_000006"
        assert len(stub.requests) == 2


@pytest.mark.parametrize("bad", [-1])
def test_a_negative_bound_is_refused(bad):
    with pytest.raises(ValueError, match="keep_requests"):
        OllamaStubServer(keep_requests=bad)
    with pytest.raises(ValueError, match="keep_requests"):
        AnthropicStubServer(keep_requests=bad)


def test_the_daemons_built_in_stub_keeps_only_a_bounded_ring():
    server = start_stub(Config().replace(daemon={"stub_chunk_delay_s": 0.0}))
    try:
        with ollama.Client(host=server.stub_url, timeout=5.0) as client:
            for _ in range(STUB_KEPT_REQUESTS + 20):
                client.ps()  # the cheapest request: each one used to stay in memory for good
        assert len(server.stub.requests) == STUB_KEPT_REQUESTS
    finally:
        server.close()
