"""A Telegram bot on corvid-actors: one session per chat participant, approvals as buttons.

Against our loopback Telegram and Ollama stubs (no token, no model, no network):

    .venv/bin/python examples/telegram_bot.py --stub

Against the real Telegram (``pip install 'corvid-actors[telegram]'``, a token from @BotFather,
and an Ollama at OLLAMA_HOST); Ctrl-C stops it:

    TELEGRAM_BOT_TOKEN=123:abc OLLAMA_HOST=http://127.0.0.1:11434 \\
        .venv/bin/python examples/telegram_bot.py --model llama3.1:8b
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile

from corvid_actors.aio import AsyncRuntime
from corvid_actors.chat import AsyncChatBridge, BridgeSettings
from corvid_actors.chat.telegram import TelegramTransport
from corvid_actors.config import load_config
from corvid_actors.testing.ollama_stub import OllamaStubServer
from corvid_actors.testing.telegram_stub import TelegramStubServer


async def main(args: argparse.Namespace) -> None:
    environ, stubs = dict(os.environ), []
    token, base_url = environ.get("TELEGRAM_BOT_TOKEN", ""), None
    if args.stub:  # both platforms on loopback, inside this process
        telegram_stub, ollama_stub = TelegramStubServer().start(), OllamaStubServer().start()
        stubs = [telegram_stub, ollama_stub]
        token, base_url, environ["OLLAMA_HOST"] = telegram_stub.token, telegram_stub.base_url, ollama_stub.url
    elif not token:
        raise SystemExit("set TELEGRAM_BOT_TOKEN (or use --stub)")
    data_dir = tempfile.mkdtemp(prefix="corvid-telegram-")
    rt = await AsyncRuntime.create(load_config(environ=environ), store_url=f"sqlite:///{data_dir}/bot.db",
                                   workspace_dir=f"{data_dir}/workspace")
    agent = await rt.ensure_agent("telegram-bot", provider="ollama", model=args.model, kind="chat",
                                  system_prompt="You are a helpful assistant in Telegram. Answer briefly.")
    transport = TelegramTransport(token, base_url=base_url, poll_timeout_s=1 if args.stub else 30)
    try:
        async with AsyncChatBridge(rt, transport, agent_id=agent.id, settings=BridgeSettings(name="telegram")):
            if not args.stub:
                print("Polling Telegram; Ctrl-C stops.", flush=True)
                await asyncio.Event().wait()
            stubs[1].add_reply("Hello from the stub model! Long replies are split, *markdown* is escaped.")
            stubs[0].push_message(chat_id=42, text="hello")
            await asyncio.to_thread(stubs[0].wait_for, lambda: stubs[0].texts(42), 10)
            for text in stubs[0].texts(42):
                print(f"bot → chat 42: {text}")
    finally:
        await rt.aclose()
        for stub in stubs:
            stub.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stub", action="store_true", help="run against loopback Telegram and Ollama stubs")
    parser.add_argument("--model", default="llama3.1:8b", help="the Ollama model (default: llama3.1:8b)")
    try:
        asyncio.run(main(parser.parse_args()))
    except KeyboardInterrupt:
        pass
