"""AsyncChatBridge with a minimal async transport: the ChatBridge's logic from asyncio, a
cancelled handler that still delivers, failing sends counted, typing relayed, and a
threaded bridge serving the same runtime side by side."""

from __future__ import annotations

import asyncio

import pytest

from corvid_actors.chat import AsyncChatBridge, ChatBridge, IncomingMessage, MemoryTransport
from corvid_actors.chat.transport import TransportError
from tests.aio.conftest import real_runtime

pytestmark = pytest.mark.anyio

WAIT_S = 5.0


class AsyncMemoryTransport:
    name = "async-memory"

    def __init__(self) -> None:
        self.sent = []
        self.typing_calls = []
        self.fail_next = 0
        self.handler = None
        self.stopped = False

    async def start(self, handler) -> None:
        self.handler = handler

    async def send(self, message) -> None:
        await asyncio.sleep(0)  # a real await on the loop
        if self.fail_next:
            self.fail_next -= 1
            raise TransportError("simulated platform failure")
        self.sent.append(message)

    async def typing(self, channel, participant, active) -> None:
        self.typing_calls.append((channel, active))

    async def stop(self) -> None:
        self.stopped = True

    async def say(self, participant, text, message_id=""):
        return await self.handler(IncomingMessage("room", participant, text, message_id))

    def texts(self, kind=None):
        return [m.text for m in self.sent if kind is None or m.kind == kind]


@pytest.fixture
async def bot(scripted, tmp_path):
    runtime = real_runtime(scripted, tmp_path)
    transport = AsyncMemoryTransport()
    bridge = AsyncChatBridge(runtime, transport)
    await bridge.start()
    yield runtime, transport, bridge
    await bridge.stop()
    runtime.shutdown()


async def eventually(predicate):
    async with asyncio.timeout(WAIT_S):
        while not (value := predicate()):
            await asyncio.sleep(0.005)
    return value


async def test_messages_commands_and_typing(bot, scripted):
    runtime, transport, bridge = bot
    scripted.reply("Hello from the session.")
    assert await transport.say("alice", "hello", "m1") == "delivered"
    await eventually(lambda: transport.texts("reply"))
    assert transport.texts("reply") == ["Hello from the session."]
    assert ("room", True) in transport.typing_calls
    await eventually(lambda: ("room", False) in transport.typing_calls)
    assert await transport.say("alice", "hello", "m1") == "duplicate"  # redelivery ignored
    assert await transport.say("alice", "/status") == "command"
    await eventually(lambda: any(t.startswith("Session ") for t in transport.texts("command")))
    assert bridge.conversation("room", "alice") is not None


async def test_a_cancelled_handler_still_delivers_the_message(bot, scripted):
    runtime, transport, bridge = bot
    scripted.reply("answered anyway")
    task = asyncio.ensure_future(transport.say("alice", "are you there?"))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: transport.texts("reply"))
    conv = await eventually(lambda: bridge.conversation("room", "alice"))
    assert ("user", "are you there?") in runtime.internals.store.recent_messages(conv.session_id, 10)


async def test_a_failing_send_is_counted_and_the_next_goes_out(bot, scripted):
    runtime, transport, bridge = bot
    scripted.reply("lost")
    scripted.reply("delivered")
    transport.fail_next = 1
    await transport.say("alice", "one")
    await eventually(lambda: bridge.stats["failed"] == 1)
    await transport.say("alice", "two")
    await eventually(lambda: transport.texts("reply"))
    assert transport.texts("reply") == ["delivered"]


async def test_threaded_and_async_bridges_share_one_runtime(scripted, tmp_path):
    from corvid_actors.chat import BridgeSettings

    runtime = real_runtime(scripted, tmp_path)
    threaded_transport = MemoryTransport()
    threaded = ChatBridge(runtime, threaded_transport, settings=BridgeSettings(name="threaded")).start()
    transport = AsyncMemoryTransport()
    try:
        async with AsyncChatBridge(runtime, transport, settings=BridgeSettings(name="async")) as bridge:
            scripted.reply("to the async bot", match="async")
            scripted.reply("to the threaded bot", match="threaded")
            await transport.say("alice", "via async")
            # a threaded transport calls the bridge from its own thread, never the loop's
            await asyncio.to_thread(threaded_transport.say, "bob", "via threaded")
            await eventually(lambda: transport.texts("reply"))
            await eventually(lambda: threaded_transport.texts("bob", kind="reply"))
        assert transport.texts("reply") == ["to the async bot"]
        assert threaded_transport.texts("bob", kind="reply") == ["to the threaded bot"]
        assert transport.stopped and bridge.stats["failed"] == 0
        assert bridge.aruntime.closed  # its own threads released; the runtime is still ours
        assert runtime.get_active_session_ids()
    finally:
        threaded.stop()
        runtime.shutdown()
