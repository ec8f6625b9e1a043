"""The Telegram transport end to end: python-telegram-bot's client against the loopback Bot
API stub, the asyncio chat bridge, the real runtime with the scripted provider. A
conversation, approvals by button and by text, a long reply split, 429 and 502 honoured, a
restart that neither repeats nor misses an update, and webhook mode."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import time
import urllib.error
import urllib.request

import pytest

from corvid_actors.chat._telegram_offset import write_offset
from corvid_actors.chat.aio_bridge import AsyncChatBridge
from corvid_actors.chat.telegram import SECRET_HEADER, TelegramTransport
from tests.chat.telegram.conftest import eventually

pytestmark = [
    pytest.mark.anyio,
    # PTB 22 warns, inside its own RetryAfter, that retry_after will become a timedelta (we handle both)
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]

ALICE, BOB, OWNER = 1001, 1002, 4242


def transport_for(tg, sleeps, **kwargs) -> TelegramTransport:
    return TelegramTransport(tg.token, base_url=tg.base_url, poll_timeout_s=1, sleep=sleeps, **kwargs)


def bridge_for(runtime, transport) -> AsyncChatBridge:
    return AsyncChatBridge(runtime, transport, is_owner={str(OWNER)}.__contains__)


def approval_messages(tg, chat):
    return [m for m in tg.sent(chat) if m["text"].startswith("[APPROVE?:")]


def approval_id_of(message) -> str:
    return re.match(r"\[APPROVE\?:(\w+)\]", message["text"]).group(1)


def user_messages(runtime, bridge, chat) -> list[str]:
    conv = bridge.conversation(str(chat), str(chat))
    return [text for role, text in runtime.internals.store.recent_messages(conv.session_id, 100) if role == "user"]


async def test_a_conversation_with_typing_and_escaped_markdown(runtime, scripted, tg, sleeps):
    scripted.reply("1. Done! See *notes*_v2.md (x=y).")
    async with bridge_for(runtime, transport_for(tg, sleeps)) as bridge:
        tg.push_message(ALICE, "hello")
        await eventually(lambda: tg.texts(ALICE))
    assert tg.texts(ALICE) == ["1. Done! See *notes*_v2.md (x=y)."]  # verbatim, not a 400
    sent = tg.calls_of("sendMessage")[0]
    assert sent["parse_mode"] == "MarkdownV2" and sent["text"].startswith("1\\. Done\\!")
    assert (ALICE, "typing") in tg.chat_actions
    assert bridge.stats["failed"] == 0
    assert tg.pending_updates == []  # confirmed at stop


async def test_approval_by_button_runs_the_tool_and_updates_the_request(tool_runtime, scripted, tg, sleeps):
    scripted.tool_call("list_files", {"path": "."})
    scripted.reply("You have notes.txt.")
    async with bridge_for(tool_runtime, transport_for(tg, sleeps)):
        tg.push_message(ALICE, "what files do I have?")
        [request] = await eventually(lambda: approval_messages(tg, ALICE))
        approval_id = approval_id_of(request)
        keyboard = request["reply_markup"]["inline_keyboard"][0]
        assert [b["callback_data"] for b in keyboard] == [f"yes {approval_id}", f"no {approval_id}"]
        tg.press_button(request["message_id"], f"yes {approval_id}")
        await eventually(lambda: "You have notes.txt." in tg.texts(ALICE))
        await eventually(lambda: "reply_markup" not in tg.sent(ALICE)[0])
    assert [a["text"] for a in tg.answered_callbacks] == ["Approved"]
    edited = tg.sent(ALICE)[0]
    assert f"Approval {approval_id} allowed: Approved by {ALICE}" in edited["text"]  # verdict in place
    assert tool_runtime.list_approvals() == []


async def test_approval_by_text_and_a_button_pressed_by_someone_else(tool_runtime, scripted, tg, sleeps):
    scripted.tool_call("list_files", {"path": "."})
    scripted.reply("Listed.")
    async with bridge_for(tool_runtime, transport_for(tg, sleeps)):
        tg.push_message(ALICE, "list them")
        [request] = await eventually(lambda: approval_messages(tg, ALICE))
        approval_id = approval_id_of(request)
        tg.press_button(request["message_id"], f"yes {approval_id}", user_id=BOB)  # not Bob's to answer
        await eventually(lambda: tg.answered_callbacks)
        assert tg.answered_callbacks[0]["text"].startswith("Only the participant")
        assert [a["id"] for a in tool_runtime.list_approvals()] == [approval_id]  # still pending
        tg.push_message(ALICE, f"no {approval_id}")  # typed, not pressed
        await eventually(lambda: "Listed." in tg.texts(ALICE))
    assert f"Approval {approval_id} denied: Denied by {ALICE}" in tg.sent(ALICE)[0]["text"]
    assert tool_runtime.list_approvals() == []


async def test_a_long_reply_is_split_at_the_limit(runtime, scripted, tg, sleeps):
    reply = " ".join(f"word{i}." for i in range(1500))  # 13,889 characters, a '.' to escape in each
    scripted.reply(reply)
    async with bridge_for(runtime, transport_for(tg, sleeps)):
        tg.push_message(ALICE, "tell me everything")
        await eventually(lambda: len(tg.texts(ALICE)) == 4)
    texts = tg.texts(ALICE)
    assert all(len(t) <= 4096 for t in texts)  # the stub refuses longer ones with Telegram's 400
    assert " ".join(texts) == reply


async def test_flood_control_429_is_honoured(runtime, scripted, tg, sleeps):
    scripted.reply("after the flood")
    tg.fail_next("sendMessage", status=429, retry_after=3)
    async with bridge_for(runtime, transport_for(tg, sleeps)) as bridge:
        tg.push_message(ALICE, "hi")
        await eventually(lambda: tg.texts(ALICE))
    assert tg.texts(ALICE) == ["after the flood"]  # once: the 429 sent nothing
    assert len(tg.calls_of("sendMessage")) == 2
    assert 3.0 in sleeps.delays
    assert bridge.stats["failed"] == 0


async def test_a_flaky_network_502_on_polling_is_retried(runtime, scripted, tg, sleeps):
    scripted.reply("through the storm")
    tg.fail_next("getUpdates", status=502, count=2)
    async with bridge_for(runtime, transport_for(tg, sleeps)):
        tg.push_message(ALICE, "hi")
        await eventually(lambda: tg.texts(ALICE))
    assert tg.texts(ALICE) == ["through the storm"]
    assert sleeps.delays[:2] == [0.5, 1.0]


async def test_polling_survives_a_conflict(runtime, scripted, tg, sleeps):
    scripted.reply("still here")
    tg.fail_next("getUpdates", status=409, count=2)  # e.g. the old instance is still polling
    async with bridge_for(runtime, transport_for(tg, sleeps)):
        tg.push_message(ALICE, "hi")
        await eventually(lambda: tg.texts(ALICE))
    assert tg.texts(ALICE) == ["still here"]
    assert sleeps.delays[:2] == [4.0, 4.0]


async def test_a_send_that_keeps_failing_is_counted_not_fatal(runtime, scripted, tg, sleeps):
    scripted.reply("lost")
    scripted.reply("second")
    tg.fail_next("sendMessage", status=502, count=5)  # max_attempts
    async with bridge_for(runtime, transport_for(tg, sleeps)) as bridge:
        tg.push_message(ALICE, "one")
        await eventually(lambda: bridge.stats["failed"] == 1)
        tg.push_message(ALICE, "two")
        await eventually(lambda: tg.texts(ALICE))
    assert tg.texts(ALICE) == ["second"]


async def test_a_restart_loses_nothing_and_repeats_nothing(runtime, scripted, tg, sleeps):
    async with bridge_for(runtime, transport_for(tg, sleeps)) as bridge:
        for i in range(3):
            tg.push_message(ALICE, f"before {i}")
        await eventually(lambda: len(tg.texts(ALICE)) == 3)
        await eventually(lambda: len(user_messages(runtime, bridge, ALICE)) == 3)
    # the bot is down: the participant keeps writing
    for i in range(2):
        tg.push_message(ALICE, f"while down {i}")
    assert len(tg.pending_updates) == 2  # the handled three were confirmed at stop
    second = transport_for(tg, sleeps)
    async with bridge_for(runtime, second) as bridge:
        await eventually(lambda: len(tg.texts(ALICE)) == 5)
        tg.push_message(ALICE, "after")
        await eventually(lambda: len(tg.texts(ALICE)) == 6)
        await runtime_settled(bridge)
        stored = user_messages(runtime, bridge, ALICE)
    assert stored == ["before 0", "before 1", "before 2", "while down 0", "while down 1", "after"]
    assert second.handled_updates == 3
    assert tg.pending_updates == []


async def test_a_crash_before_confirming_repeats_nothing_with_an_offset_file(runtime, scripted, tg, sleeps,
                                                                             tmp_path):
    offset_file = tmp_path / "telegram.offset"
    async with bridge_for(runtime, transport_for(tg, sleeps, offset_path=offset_file)) as bridge:
        await eventually(lambda: tg.calls_of("getUpdates"))  # a long poll is waiting
        for i in range(2):
            tg.push_message(ALICE, f"before {i}")
        # the waiting poll returns both; then the network is gone until the bot is down, so the
        # handled updates are never confirmed (as if the bot were killed before its next poll)
        tg.fail_next("getUpdates", status=502, count=1_000_000)
        await eventually(lambda: len(tg.texts(ALICE)) == 2)
    tg.clear_faults()
    assert len(tg.pending_updates) == 2  # Telegram will offer both again
    assert json.loads(offset_file.read_text())["offset"] == max(tg.pending_updates) + 1
    tg.push_message(ALICE, "after")
    second = transport_for(tg, sleeps, offset_path=offset_file)
    async with bridge_for(runtime, second) as bridge:
        await eventually(lambda: len(tg.texts(ALICE)) == 3)
        await runtime_settled(bridge)
        stored = user_messages(runtime, bridge, ALICE)
    assert stored == ["before 0", "before 1", "after"]  # nothing handled twice
    assert second.handled_updates == 1
    assert tg.pending_updates == []


def test_an_offset_file_older_than_a_week_is_ignored(tmp_path):
    import datetime as dt

    from corvid_actors.chat._telegram_offset import read_offset, write_offset

    path = tmp_path / "offset"
    saved = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    write_offset(path, 1234, saved)
    assert read_offset(path, saved + dt.timedelta(days=1)) == 1234
    assert read_offset(path, saved + dt.timedelta(days=8)) == 0  # Telegram's ids may have restarted
    assert read_offset(tmp_path / "missing", saved) == 0
    path.write_text("garbage")
    assert read_offset(path, saved) == 0


async def runtime_settled(bridge):
    await bridge.aruntime.settle(5)


async def test_webhook_mode(runtime, scripted, tg, sleeps):
    scripted.reply("via webhook")
    transport = transport_for(tg, sleeps, mode="webhook", listen=("127.0.0.1", 0), secret_token="s3cret")
    async with bridge_for(runtime, transport):
        assert tg.webhook_url == f"http://127.0.0.1:{transport.webhook_port}/telegram"
        assert tg.webhook_secret == "s3cret"
        tg.push_message(ALICE, "hi")
        await eventually(lambda: tg.texts(ALICE))
        # a forged request (no secret) is refused
        request = urllib.request.Request(tg.webhook_url, data=json.dumps({"update_id": 1}).encode(),
                                         method="POST", headers={SECRET_HEADER: "wrong"})
        status = await bridge_status(request)
        assert status == 403
    assert tg.texts(ALICE) == ["via webhook"]
    assert tg.pending_updates == []  # answered 200 once handled
    assert tg.calls_of("getUpdates") == []


async def bridge_status(request) -> int:
    import asyncio

    def post():
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    return await asyncio.get_running_loop().run_in_executor(None, post)


async def raw_status(port: int, data: bytes) -> int:
    """Send ``data`` raw to the webhook server; the HTTP status it answers (bounded wait)."""
    import asyncio

    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(data)
        await writer.drain()
        status_line = await reader.readline()
        writer.close()
    return int(status_line.split()[1])


async def test_the_webhook_server_refuses_bad_requests(runtime, tg, sleeps):
    transport = transport_for(tg, sleeps, mode="webhook", listen=("127.0.0.1", 0), secret_token="s3cret",
                              webhook_read_timeout_s=0.05)
    async with bridge_for(runtime, transport):
        port = transport.webhook_port
        assert await raw_status(port, b"POST /elsewhere HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}") == 404
        assert await raw_status(port, b"POST /telegram HTTP/1.1\r\n\r\n") == 400  # no body
        assert await raw_status(port, b"POST /telegram HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n") == 413
        assert await raw_status(port, b"POST /telegram HTTP/1.1\r\nContent-Len") == 408  # stalls
        assert await raw_status(port, b"POST /telegram HTTP/1.1\r\nContent-Length: 2\r\n"
                                      b"X-Telegram-Bot-Api-Secret-Token: s3cret\r\n\r\n{]") == 400
    assert tg.texts() == []


async def test_stopping_while_an_update_is_handled_finishes_and_confirms_it(tg, sleeps):
    import asyncio

    transport = transport_for(tg, sleeps)
    entered, release, handled = asyncio.Event(), asyncio.Event(), []

    async def slow_handler(message):
        entered.set()
        await release.wait()
        handled.append(message.text)
        return "delivered"

    await transport.start(slow_handler)
    try:
        tg.push_message(ALICE, "in flight")
        async with asyncio.timeout(5):
            await entered.wait()
        stopping = asyncio.ensure_future(transport.stop_receiving())
        await asyncio.sleep(0.02)
        assert not stopping.done()  # waits for the update in hand
        release.set()
        async with asyncio.timeout(5):
            await stopping
    finally:
        await transport.stop()
    assert handled == ["in flight"]
    assert tg.pending_updates == []  # confirmed: a restart will not handle it again


#: stops, each cancelling the first poll after a different number of event-loop turns (its
#: connection is being opened for some of them)
STOP_ROUNDS = 16


async def test_a_stop_that_cancels_a_poll_in_flight_still_confirms_at_once(tg, sleeps, tmp_path):
    # The stop cancels the getUpdates in flight. A request cancelled while its new
    # connection is being opened leaves that connection holding a pool slot for good
    # (encode/httpcore#1093, open in httpcore 1.0.9); the poll client has one slot, so the
    # confirmation after it waited for it in vain — 1 s of pool timeout per attempt, 5
    # attempts — and the handled updates were never confirmed (without an offset file, a
    # restart handles them again). Each round stops a bot whose offset (from its file) is
    # not confirmed yet, a few event-loop turns after its first poll began.
    for turns in range(STOP_ROUNDS):
        offset_file = tmp_path / f"offset-{turns}"
        write_offset(offset_file, 100 + turns, dt.datetime.now(dt.UTC))
        transport = transport_for(tg, sleeps, offset_path=offset_file)
        asked = len(tg.calls_of("getUpdates"))
        await transport.start(no_messages)
        try:
            for _ in range(turns):
                await asyncio.sleep(0)
            started = time.monotonic()
            async with asyncio.timeout(8):
                await transport.stop_receiving()
            took = time.monotonic() - started
        finally:
            await transport.stop()
        confirmations = [c for c in tg.calls_of("getUpdates")[asked:]
                         if c.get("timeout") == 0 and c.get("offset") == 100 + turns]
        assert took < 0.9 and confirmations, (turns, took)


async def no_messages(message):
    raise AssertionError(f"no message was sent, got {message}")
