"""corvid-actors inside a bot's own python-telegram-bot Application: the application (built
here, pointed at the loopback Bot API stub) owns its handlers and its update loop; the
transport's handlers, added to it, route the conversations to the runtime (scripted model)."""

from __future__ import annotations

import asyncio
import re
import threading
from contextlib import asynccontextmanager

import pytest
from telegram import InlineKeyboardButton, InlineKeyboardMarkup
from telegram.ext import Application, ApplicationBuilder, CallbackQueryHandler, CommandHandler

from corvid_actors.chat.aio_bridge import AsyncChatBridge
from corvid_actors.chat.telegram import TelegramTransport
from tests.chat.telegram.conftest import eventually

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]

ALICE = 1001
#: the stub holds a long poll at most this long (MAX_POLL_S); the app's updater stops within it
POLL_TIMEOUT_S = 1


def bot_application(tg) -> Application:
    """A bot as its developer writes it: its own /ping command and its own menu button."""
    app = ApplicationBuilder().token(tg.token).base_url(tg.base_url).build()

    async def ping(update, context):
        await update.effective_message.reply_text("pong")

    async def menu(update, context):
        await update.effective_message.reply_text("the menu", reply_markup=InlineKeyboardMarkup(
            [[InlineKeyboardButton("Prices", callback_data="prices")]]))

    async def prices(update, context):
        await update.callback_query.answer("Prices are free")

    app.add_handler(CommandHandler("ping", ping))
    app.add_handler(CommandHandler("menu", menu))
    app.add_handler(CallbackQueryHandler(prices, pattern="^prices$"))
    return app


@asynccontextmanager
async def polling(app):
    """Run the application's own update loop (what ``run_polling`` does, minus the signals)."""
    async with app:
        await app.updater.start_polling(timeout=POLL_TIMEOUT_S, poll_interval=0)
        await app.start()
        try:
            yield app
        finally:
            await app.updater.stop()
            await app.stop()


def our_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("chat-outbox")}


async def test_the_app_answers_its_commands_and_the_agent_the_conversation(runtime, scripted, tg):
    scripted.reply("Hello from the agent.")
    tasks_before = asyncio.all_tasks()
    app = bot_application(tg)
    own_handlers = {group: list(handlers) for group, handlers in app.handlers.items()}
    transport = TelegramTransport.from_application(app)
    async with polling(app):
        async with AsyncChatBridge(runtime, transport) as bridge:
            tg.push_message(ALICE, "/ping")
            await eventually(lambda: tg.texts(ALICE) == ["pong"])
            tg.push_message(ALICE, "hello")
            await eventually(lambda: len(tg.texts(ALICE)) == 2)
            tg.push_message(ALICE, "/help")  # not the app's command: the bridge's
            await eventually(lambda: len(tg.texts(ALICE)) == 3)
        assert app.handlers == own_handlers  # the transport's handlers are gone with it
        # the app goes on without corvid-actors: its commands answered, the rest not taken
        tg.push_message(ALICE, "still there?")
        tg.push_message(ALICE, "/ping")
        await eventually(lambda: len(tg.texts(ALICE)) == 4)
    texts = tg.texts(ALICE)
    assert texts[:2] == ["pong", "Hello from the agent."]
    assert "/status" in texts[2]  # the bridge's help
    assert texts[3] == "pong"
    conv = bridge.conversation(str(ALICE), str(ALICE))
    stored = runtime.internals.store.recent_messages(conv.session_id, 100)
    assert [text for role, text in stored if role == "user"] == ["hello"]  # not "still there?"
    assert bridge.stats["failed"] == 0
    assert tg.pending_updates == []  # the app confirmed every update it fetched
    # nothing of ours is left running: no task on the loop, no outbox thread, no polling
    assert asyncio.all_tasks() - tasks_before == set()
    assert not our_threads()
    polls = len(tg.calls_of("getUpdates"))
    await asyncio.sleep(0.3)
    assert len(tg.calls_of("getUpdates")) == polls
    assert transport.handled_updates == 2  # "hello" and "/help"


async def test_approval_buttons_go_to_the_bridge_and_the_apps_buttons_stay_the_apps(tool_runtime, scripted, tg):
    scripted.tool_call("list_files", {"path": "."})
    scripted.reply("You have notes.txt.")
    app = bot_application(tg)
    async with polling(app), AsyncChatBridge(tool_runtime, TelegramTransport.from_application(app)):
        tg.push_message(ALICE, "/menu")
        [menu] = await eventually(lambda: [m for m in tg.sent(ALICE) if m["text"] == "the menu"])
        tg.press_button(menu["message_id"], "prices")
        await eventually(lambda: tg.answered_callbacks)
        tg.push_message(ALICE, "what files do I have?")
        [request] = await eventually(lambda: [m for m in tg.sent(ALICE) if m["text"].startswith("[APPROVE?:")])
        approval_id = re.match(r"\[APPROVE\?:(\w+)\]", request["text"]).group(1)
        tg.press_button(request["message_id"], f"yes {approval_id}")
        await eventually(lambda: "You have notes.txt." in tg.texts(ALICE))
    assert [a.get("text") for a in tg.answered_callbacks] == ["Prices are free", "Approved"]
    assert tool_runtime.list_approvals() == []
