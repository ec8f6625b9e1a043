"""Regression: the stub servers stream on connections whose descriptor is >= 1024.

A stub serving a thousand streams at once (the chaos and scale runs) hands out such
descriptors; ``select()`` cannot watch them (FD_SETSIZE) and every slow stream on one
died with ``ValueError: filedescriptor out of range``. The stubs wait with ``poll()``.
"""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator

import anthropic
import ollama
import pytest

from corvid_actors.testing.anthropic_stub import AnthropicStubServer
from corvid_actors.testing.ollama_stub import OllamaStubServer

FD_SETSIZE = 1024
PIPES = 600  # 1,200 descriptors: every socket opened afterwards is numbered above 1024


@pytest.fixture
def high_descriptors() -> Iterator[None]:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft >= 2 * PIPES + 100, f"RLIMIT_NOFILE {soft} is too low for this test"
    pipes = [os.pipe() for _ in range(PIPES)]
    try:
        with socket.socket() as probe:  # the precondition: new sockets are numbered high
            assert probe.fileno() >= FD_SETSIZE
        yield
    finally:
        for read_end, write_end in pipes:
            os.close(read_end)
            os.close(write_end)


def test_ollama_stub_streams_slowly_on_a_high_descriptor(high_descriptors):
    with OllamaStubServer() as stub:
        stub.add_reply("one two three", delay_s=0.01)
        client = ollama.Client(host=stub.url)
        parts = [p.message.content for p in client.chat(model="llama3.1:8b", stream=True,
                                                        messages=[{"role": "user", "content": "hi"}])]
        client.close()
        assert "".join(parts) == "one two three"
        # the stub counts the stream once its handler thread wrote the end, which may come
        # after the client has read the last chunk: wait for it (bounded), do not peek
        assert stub.wait_for(lambda: stub.completed_streams == 1, timeout_s=5.0), stub.completed_streams


def test_anthropic_stub_streams_slowly_on_a_high_descriptor(high_descriptors):
    with AnthropicStubServer(api_key="k") as stub:
        stub.add_fault("slow", text="one two three", delay_s=0.01)
        client = anthropic.Anthropic(api_key="k", base_url=stub.url, max_retries=0)
        with client.messages.stream(model="claude-sonnet-5-5", max_tokens=50,
                                    messages=[{"role": "user", "content": "hi"}]) as stream:
            text = "".join(stream.text_stream)
        client.close()
        assert text == "one two three"
        # the handler thread finishes after the client's last read: wait for it, then check
        # it was not cut (a disconnect recorded later would otherwise go unseen)
        assert stub.wait_for(lambda: stub.completed_streams == 1 or stub.disconnects, timeout_s=5.0)
        assert stub.disconnects == []
        assert stub.completed_streams == 1
