"""``streams_async`` / ``streams_on_clock`` answer what ``isinstance`` with the runtime
protocols answers (the session actor asks for every model call; the protocol check was
as costly as a message)."""

from __future__ import annotations

import pytest

from corvid_actors.providers.anthropic import AnthropicProvider
from corvid_actors.providers.base import (
    AsyncStreaming,
    ClockStreaming,
    streams_async,
    streams_on_clock,
)
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing.scripted import ScriptedProvider


class _NoneAttribute:
    stream_soon = None
    astream = None


@pytest.mark.parametrize("provider", [
    ScriptedProvider(), OllamaProvider("http://127.0.0.1:1"), AnthropicProvider("k", base_url="http://127.0.0.1:1"),
    object(), _NoneAttribute(),
], ids=lambda p: type(p).__name__)
def test_the_cheap_checks_agree_with_the_protocols(provider):
    assert streams_async(provider) == isinstance(provider, AsyncStreaming)
    assert streams_on_clock(provider) == isinstance(provider, ClockStreaming)
