"""examples/telegram_bot.py: runs with one command against the stubs and prints the replies;
with ``--base-url`` it talks to that Bot API server (here our stub) instead of Telegram's."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corvid_actors.testing.ollama_stub import OllamaStubServer
from tests.chat.telegram.conftest import eventually

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "telegram_bot.py"
#: a fresh interpreter imports the package and PTB, and builds a runtime: bounded, generous
EXAMPLE_TIMEOUT_S = 60
#: the example's bot builds a runtime and polls the stub (a long poll is held 1 s at most)
BOT_WAIT_S = 15


def load_example():
    spec = importlib.util.spec_from_file_location("telegram_bot_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_bot_answers_over_the_stubs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parents[1])}
    env.pop("TELEGRAM_BOT_TOKEN", None)
    env.pop("OLLAMA_HOST", None)
    result = subprocess.run([sys.executable, str(EXAMPLE), "--stub"], capture_output=True, text=True,
                            timeout=EXAMPLE_TIMEOUT_S, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "bot → chat 42: pong" in result.stdout  # the bot's own command
    assert "bot → chat 42: Hello from the stub model! Long replies are split, *markdown* is escaped." \
        in result.stdout


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
async def test_base_url_points_the_example_at_another_bot_api_server(tg, monkeypatch):
    example = load_example()
    args = example.parse_args(["--base-url", tg.base_url, "--model", "stub-model"])
    with OllamaStubServer() as ollama:
        ollama.add_reply("Hi from the model.")
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
        monkeypatch.setenv("OLLAMA_HOST", ollama.url)
        stop = asyncio.Event()
        bot = asyncio.ensure_future(example.main(args, stop))
        try:
            await eventually(lambda: tg.calls_of("getUpdates") or bot.done(), BOT_WAIT_S)
            tg.push_message(42, "/ping")
            tg.push_message(42, "hello")
            await eventually(lambda: len(tg.texts(42)) == 2 or bot.done(), BOT_WAIT_S)
        finally:
            stop.set()
            async with asyncio.timeout(BOT_WAIT_S):
                await bot
    assert tg.texts(42) == ["pong", "Hi from the model."]
    assert tg.calls_of("getMe")  # the token went to our server, not to api.telegram.org
    polls = len(tg.calls_of("getUpdates"))
    await asyncio.sleep(0.3)
    assert len(tg.calls_of("getUpdates")) == polls  # the bot stopped polling
