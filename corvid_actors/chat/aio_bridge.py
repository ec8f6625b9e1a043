"""The chat bridge for asyncio bots: :class:`AsyncChatBridge` and :class:`AsyncChatTransport`.

    async with AsyncChatBridge(runtime, TelegramTransport(token), agent_id=agent.id):
        await stop_signal.wait()

It is the same :class:`~corvid_actors.chat.bridge.ChatBridge` — conversations per channel
and participant, commands, approvals by participant, credits, the outbox — with the
thread ↔ event-loop plumbing done once, here:

- incoming: the async transport awaits ``handler(IncomingMessage)``; the bridge's blocking
  work (the store, actor asks) runs on the :class:`~corvid_actors.aio.AsyncRuntime`'s
  threads, so the loop never waits. The call completes even if the awaiting task is
  cancelled (a message the platform sent is persisted or refused, never half-handled).
- outgoing: the bridge's outbox thread schedules ``await transport.send(message)`` on the
  loop and waits for it there (off the loop), so a slow platform slows only the outbox —
  never the EventBus or a session — and failures are counted in ``stats`` as for the
  threaded transports.

An :class:`AsyncChatTransport` has ``async start(handler)``, ``async send(message)``,
``async stop()`` and optionally ``async typing(channel, participant, active)`` (told when a
conversation's session starts and stops thinking), ``can_edit = True`` with ``async
update_reply(update)`` (replies streamed as they are written, see
:mod:`corvid_actors.chat.transport`) and ``async stop_receiving()`` (then
``stop()`` comes after the bridge delivered its queued replies, so it may close the client). Threaded transports keep using
:class:`ChatBridge` directly; both kinds may serve one runtime side by side.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, runtime_checkable

from corvid_actors.aio import AsyncRuntime
from corvid_actors.chat.bridge import ChatBridge
from corvid_actors.chat.bridge_settings import BridgeSettings
from corvid_actors.chat.conversations import Conversation
from corvid_actors.chat.delivery import can_edit
from corvid_actors.chat.transport import (
    IncomingMessage,
    MessageHandler,
    OutgoingMessage,
    ReplyUpdate,
    TransportError,
)
from corvid_actors.errors import RuntimeStoppedError
from corvid_actors.runtime import Runtime

__all__ = ["AsyncChatBridge", "AsyncChatTransport", "AsyncMessageHandler"]

AsyncMessageHandler = Callable[[IncomingMessage], Awaitable[str]]


@runtime_checkable
class AsyncChatTransport(Protocol):
    """A chat platform adapter on asyncio (see the module docstring and
    :mod:`corvid_actors.chat.transport` for what the messages mean)."""

    name: str

    async def start(self, handler: AsyncMessageHandler) -> None:
        """Start receiving: await ``handler(IncomingMessage(...))`` for each message."""
        ...

    async def send(self, message: OutgoingMessage) -> None:
        """Deliver one message to the platform; may raise :class:`TransportError`."""
        ...

    async def stop(self) -> None:
        """Stop receiving and release the platform's client."""
        ...


class _LoopTransport:
    """The threaded face the ChatBridge sees: each send runs on the event loop."""

    def __init__(self, transport: AsyncChatTransport, loop: asyncio.AbstractEventLoop) -> None:
        self.name = transport.name
        self._transport = transport
        self._loop = loop
        if callable(getattr(transport, "typing", None)):
            self.typing = self._typing
        if can_edit(transport):  # replies stream: each update runs on the loop too
            self.can_edit = True
            self.update_reply = self._update_reply

    def start(self, handler: MessageHandler) -> None:
        pass  # the async transport is started by AsyncChatBridge.start

    def stop(self) -> None:
        pass

    def send(self, message: OutgoingMessage) -> None:
        self._run(self._transport.send(message))

    def _update_reply(self, update: ReplyUpdate) -> None:
        self._run(self._transport.update_reply(update))  # type: ignore[attr-defined]

    def _typing(self, channel: str, participant: str, active: bool) -> None:
        self._run(self._transport.typing(channel, participant, active))  # type: ignore[attr-defined]

    def _run(self, coro: Coroutine[Any, Any, None]) -> None:
        # On the outbox thread: wait for the loop to do it (the outbox exists to wait).
        if self._loop.is_closed():
            coro.close()
            raise TransportError("the bot's event loop is closed")
        asyncio.run_coroutine_threadsafe(coro, self._loop).result()


class AsyncChatBridge:
    """See the module docstring. ``await start()`` / ``await stop()``, or ``async with``.

    ``runtime`` is a :class:`~corvid_actors.runtime.Runtime` or an
    :class:`~corvid_actors.aio.AsyncRuntime`; the other arguments are :class:`ChatBridge`'s.
    """

    def __init__(self, runtime: Runtime | AsyncRuntime, transport: AsyncChatTransport, *, agent_id: str | None = None,
                 project_id: str | None = None, is_owner: Callable[[str], bool] | None = None,
                 settings: BridgeSettings | None = None) -> None:
        #: a Runtime given: the bridge has threads of its own for it, released by ``stop()``
        self._own_threads = not isinstance(runtime, AsyncRuntime)
        self.aruntime = runtime if isinstance(runtime, AsyncRuntime) else AsyncRuntime(runtime, owns_runtime=False)
        self.transport = transport
        self._new_bridge = functools.partial(ChatBridge, agent_id=agent_id, project_id=project_id,
                                             is_owner=is_owner, settings=settings)
        self.bridge: ChatBridge | None = None
        self._last_bridge: ChatBridge | None = None

    async def start(self) -> AsyncChatBridge:
        """Start the bridge and its transport (also ``async with``); idempotent. Returns the bridge."""
        if self.bridge is None:
            if self._own_threads and self.aruntime.closed:  # started again after a stop
                self.aruntime = AsyncRuntime(self.aruntime.runtime, owns_runtime=False)
            loop = asyncio.get_running_loop()
            bridge = self._new_bridge(self.aruntime.runtime, _LoopTransport(self.transport, loop))
            await self.aruntime.run_blocking(bridge.start)
            self.bridge = self._last_bridge = bridge
            await self.transport.start(self.handle)
        return self

    async def handle(self, message: IncomingMessage) -> str:
        """The transport's handler: ``ChatBridge.handle`` off the loop (same outcomes)."""
        bridge = self.bridge
        if bridge is None:
            raise RuntimeStoppedError("the chat bridge is stopped")
        return str(await self.aruntime.run_blocking(bridge.handle, message))

    async def stop(self) -> None:
        """Stop the transport, unsubscribe, deliver what is queued (through the loop)."""
        bridge, self.bridge = self.bridge, None
        if bridge is None:
            return
        stop_receiving = getattr(self.transport, "stop_receiving", None)
        if stop_receiving is not None:
            await stop_receiving()
            await self.aruntime.run_blocking(bridge.stop)  # queued replies still go out
            await self.transport.stop()
        else:
            await self.transport.stop()
            await self.aruntime.run_blocking(bridge.stop)
        if self._own_threads:
            await self.aruntime.aclose()  # the threads only: the runtime is the caller's

    async def __aenter__(self) -> AsyncChatBridge:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def stats(self) -> dict[str, int]:
        """The outbox counters (``ChatBridge.stats``), also after ``stop()``."""
        return self._last_bridge.stats if self._last_bridge is not None else {}

    def conversation(self, channel: str, participant: str) -> Conversation | None:
        """The conversation's session, if it has one (a store read: call it off the loop
        in a busy bot)."""
        bridge = self.bridge or self._last_bridge
        return bridge.conversation(channel, participant) if bridge is not None else None
