"""Issue 12 (items 12–19): the direct process as the original behaves, through the runtime
over the real ollama client and the stub server (routing, summary epilogue, tool-result caps,
queue_status, text tool calls, approvals)."""

from __future__ import annotations

import pytest

from corvid_actors.config import Config
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing.ollama_stub import OllamaStubServer

MODEL = "llama3.1:8b"  # native tools, 8B → slot weight 2


@pytest.fixture
def stub():
    with OllamaStubServer() as server:
        yield server


def make(make_e2e, stub, **slots):
    cfg = Config().replace(slots={"max_parallel": 4, **slots})
    return make_e2e({"ollama": OllamaProvider(stub.url)}, cfg)


@pytest.fixture
def e2e(make_e2e, stub):
    return make(make_e2e, stub)


def provider_notes(e2e, sid):
    return [e.message for e in e2e.events(sid, "system") if e.subtype == "provider_selected"]


# --- item 12: fallback routing ----------------------------------------------------------


def test_fallback_to_ollama_replaces_a_cloud_model_with_the_ollama_default(e2e, stub):
    stub.default_reply = "hello"
    s = e2e.session(provider="", model="claude-sonnet-4-6")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert stub.chat_requests[-1].json["model"] == Config().providers.ollama_default_model == "qwen3:8b"
    assert provider_notes(e2e, s.id) == ["Provider: ollama (fallback: no_claude_access)"]
    assert e2e.events(s.id, "assistant")[-1].content == "hello"


@pytest.mark.parametrize("model", ["llama3.1:8b", "qwen2.5-coder", "llama3", "mistral:7b"])
def test_fallback_keeps_a_model_name_that_looks_like_an_ollama_model(e2e, stub, model):
    stub.default_reply = "hello"
    s = e2e.session(provider="", model=model)
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert stub.chat_requests[-1].json["model"] == model
    assert provider_notes(e2e, s.id) == ["Provider: ollama (fallback: no_claude_access)"]


def test_an_explicit_ollama_provider_is_no_fallback_and_keeps_its_model(e2e, stub):
    stub.default_reply = "hello"
    s = e2e.session(provider="ollama", model="claude-sonnet-4-6")
    e2e.runtime.start_process(s.id, "hi")
    e2e.runtime.settle()
    assert stub.chat_requests[-1].json["model"] == "claude-sonnet-4-6"  # the operator chose it
    assert provider_notes(e2e, s.id) == ["Provider: ollama (claude-sonnet-4-6)"]
