"""A Telegram bot on corvid-actors: one session per chat participant, approvals as buttons.

The bot is a python-telegram-bot ``Application`` of its own, with its own ``/ping``
command and its own update loop; ``TelegramTransport.from_application`` adds the handlers
that route every other conversation to the agent.

Against our loopback Telegram and Ollama stubs (no token, no model, no network):

    .venv/bin/python examples/telegram_bot.py --stub

Against the real Telegram (``pip install 'corvid-actors[telegram]'``, a token from @BotFather,
and an Ollama at OLLAMA_HOST); Ctrl-C stops it:

    TELEGRAM_BOT_TOKEN=123:abc OLLAMA_HOST=http://127.0.0.1:11434 \\
        .venv/bin/python examples/telegram_bot.py --model llama3.1:8b

Against another Bot API server (a local ``telegram-bot-api``, a test fake), ``--base-url``
without the token, e.g. ``--base-url http://127.0.0.1:8081/bot``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
from collections.abc import Mapping

from telegram import Update
from telegram.ext import Application, ApplicationBuilder, CommandHandler, ContextTypes

from corvid_actors.aio import AsyncRuntime
from corvid_actors.chat import AsyncChatBridge, BridgeSettings
from corvid_actors.chat.telegram import TelegramTransport
from corvid_actors.config import load_config
from corvid_actors.testing.ollama_stub import OllamaStubServer
from corvid_actors.testing.telegram_stub import TelegramStubServer


async def ping(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """The bot's own command, answered by its own code."""
    if update.effective_message is not None:
        await update.effective_message.reply_text("pong")


def build_application(token: str, base_url: str | None = None) -> Application:
    """The bot's Application: its own handlers first, then corvid-actors' (added at start)."""
    builder = ApplicationBuilder().token(token)
    if base_url:
        builder = builder.base_url(base_url)
    app = builder.build()
    app.add_handler(CommandHandler("ping", ping))
    return app


async def run_bot(token: str, base_url: str | None, model: str, environ: Mapping[str, str],
                  stop: asyncio.Event, *, poll_timeout_s: int = 30, started: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set; ``started`` is set once the bot polls."""
    data_dir = tempfile.mkdtemp(prefix="corvid-telegram-")
    rt = await AsyncRuntime.create(load_config(environ=dict(environ)), store_url=f"sqlite:///{data_dir}/bot.db",
                                   workspace_dir=f"{data_dir}/workspace")
    try:
        agent = await rt.ensure_agent("telegram-bot", provider="ollama", model=model, kind="chat",
                                      system_prompt="You are a helpful assistant in Telegram. Answer briefly.")
        app = build_application(token, base_url)
        transport = TelegramTransport.from_application(app)
        async with app, AsyncChatBridge(rt, transport, agent_id=agent.id,
                                        settings=BridgeSettings(name="telegram")):
            await app.updater.start_polling(timeout=poll_timeout_s)  # the app's own update loop
            await app.start()
            try:
                if started is not None:
                    started.set()
                await stop.wait()
            finally:
                await app.updater.stop()
                await app.stop()
    finally:
        await rt.aclose()
        shutil.rmtree(data_dir, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stub", action="store_true", help="run against loopback Telegram and Ollama stubs")
    parser.add_argument("--model", default="llama3.1:8b", help="the Ollama model (default: llama3.1:8b)")
    parser.add_argument("--base-url", default=None,
                        help="a Bot API server other than Telegram's, without the token "
                             "(default: https://api.telegram.org/bot)")
    return parser.parse_args(argv)


async def main(args: argparse.Namespace, stop: asyncio.Event | None = None) -> None:
    """Run the bot until ``stop`` is set (default: until cancelled, e.g. by Ctrl-C)."""
    environ, stop = dict(os.environ), stop or asyncio.Event()
    if not args.stub:
        token = environ.get("TELEGRAM_BOT_TOKEN", "")
        if not token:
            raise SystemExit("set TELEGRAM_BOT_TOKEN (or use --stub)")
        print("Polling Telegram; Ctrl-C stops.", flush=True)
        await run_bot(token, args.base_url, args.model, environ, stop)
        return
    # both platforms on loopback, inside this process
    with TelegramStubServer() as telegram_stub, OllamaStubServer() as ollama_stub:
        environ["OLLAMA_HOST"] = ollama_stub.url
        started = asyncio.Event()
        bot = asyncio.ensure_future(run_bot(telegram_stub.token, telegram_stub.base_url, args.model, environ,
                                            stop, poll_timeout_s=1, started=started))
        try:
            await asyncio.wait_for(started.wait(), 30)
            ollama_stub.add_reply("Hello from the stub model! Long replies are split, *markdown* is escaped.")
            telegram_stub.push_message(chat_id=42, text="/ping")
            telegram_stub.push_message(chat_id=42, text="hello")
            await asyncio.to_thread(telegram_stub.wait_for, lambda: len(telegram_stub.texts(42)) >= 2, 10)
            for text in telegram_stub.texts(42):
                print(f"bot → chat 42: {text}")
        finally:
            stop.set()
            await bot


if __name__ == "__main__":
    try:
        asyncio.run(main(parse_args()))
    except KeyboardInterrupt:
        pass
