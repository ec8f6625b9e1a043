"""Which model server the daemon uses: a real Ollama when one answers, else the stub."""

from __future__ import annotations

import socket

import pytest

from corvid_actors.config import Config
from corvid_actors.daemon.model_server import start_model_server
from corvid_actors.errors import ConfigError
from corvid_actors.testing.ollama_stub import OllamaStubServer


def config(host: str, **daemon) -> Config:
    return Config().replace(providers={"ollama_host": host}, daemon={"provider_probe_timeout_s": 1.0, **daemon})


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_auto_uses_an_ollama_that_answers():
    with OllamaStubServer() as real:  # stands in for a real Ollama: it speaks the same protocol
        server = start_model_server(config(real.url))
        try:
            assert server.stub_url is None and server.description == f"Ollama at {real.url}"
            assert set(server.providers) == {"ollama"} and server.providers["ollama"].health()
        finally:
            server.close()


def test_auto_starts_the_stub_and_says_so_when_nothing_answers(capsys):
    from loguru import logger

    sink = logger.add(lambda message: print(message, end=""), level="WARNING")
    logger.enable("corvid_actors")  # a library logs nothing until its host enables it
    server = start_model_server(config(closed_port_url(), stub_reply="canned"))
    try:
        assert server.stub_url is not None and server.config.providers.ollama_host == server.stub_url
        assert server.providers["ollama"].health()
        assert capsys.readouterr().out == ""  # announced by the caller, once all else started
        server.announce()
        out = capsys.readouterr().out
        assert "NO MODEL PROVIDER IS CONFIGURED" in out and server.stub_url in out
        assert out.count("WARNING") == 1  # one record, however many lines
    finally:
        logger.disable("corvid_actors")
        logger.remove(sink)
        server.close()
    assert not server.providers["ollama"].health()  # stopped with the server


def test_forced_choices():
    url = closed_port_url()
    server = start_model_server(config(url, provider="ollama"))
    assert server.stub_url is None and server.description == f"Ollama at {url}"
    server.close()
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        start_model_server(config(url, provider="anthropic"))
