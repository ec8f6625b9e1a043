"""corvid_actors.aio — the runtime's face for asyncio programs (chat bots on asyncio clients).

    async with AsyncRuntime(Runtime(config)) as rt:
        session = await rt.create_session(agent_id=agent.id, source="chat")
        async with rt.events(session.id) as stream:
            await rt.start_process(session.id, "hello")
            async for event in stream:
                if event.type == "result":
                    break

How it relates to :class:`~corvid_actors.runtime.Runtime`: it *is* the same runtime. Every
method of :class:`AsyncRuntime` is the Runtime method of the same name, run on a small
thread pool of its own (``run_in_executor``), because each one is an actor ``ask`` that
blocks its caller until the actor replies. The event loop never waits on an actor, a lock
or the store; a threaded part of the program (an admin socket, a threaded chat transport)
may keep using the Runtime directly at the same time.

Cancellation: cancelling a task that awaits a method stops the *waiting*, nothing else.
The request was already handed to the actor and completes (a cancelled ``start_process``
may still start the session); stop a session with ``await rt.stop_process(...)``.

Events: :meth:`AsyncRuntime.events` (one session, across its restarts) and
:meth:`AsyncRuntime.all_events` (every session, as ``(session_id, event)`` pairs) are
async context managers over a bounded buffer filled on the EventBus thread. The policy
for a consumer that reads slower than sessions talk:

- consecutive ``content_block_delta`` events of a session that are still waiting in the
  buffer are coalesced into one (their text joined) — a slow reader sees fewer, larger
  deltas, never lost text;
- no other event is ever dropped or merged;
- when ``max_pending`` items wait, the stream ends: the subscription is removed, the
  reader receives everything buffered, then one :class:`StreamOverflow` event, then the
  iteration stops. Memory stays bounded; the reader knows it missed events and may open a
  new stream (and re-read state such as ``session_info`` or the stored messages).

Works under ``asyncio.run`` and ``uvloop`` alike (it uses only ``loop.run_in_executor``,
``call_soon_threadsafe`` and futures).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar

from corvid_actors.content import UserContent
from corvid_actors.db.ledger import Account, Deduction
from corvid_actors.errors import RuntimeStoppedError
from corvid_actors.events import ContentBlockDelta, Event
from corvid_actors.jsontypes import WireJson
from corvid_actors.runtime import Runtime

__all__ = ["AsyncRuntime", "EventStream", "StreamOverflow", "DEFAULT_MAX_PENDING", "DEFAULT_WORKERS"]

#: items an event stream buffers for a slow reader before it overflows and ends
DEFAULT_MAX_PENDING = 1000
#: threads that carry blocking Runtime calls for one AsyncRuntime
DEFAULT_WORKERS = 8

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


@dataclass(frozen=True)
class StreamOverflow(Event):
    """The last item of an event stream whose reader fell ``max_pending`` items behind.

    The stream was unsubscribed when it overflowed: events after ``dropped_after`` (the
    number of items the reader was given before this one) were not delivered to it.
    """

    type: ClassVar[str] = "stream_overflow"
    max_pending: int = 0
    dropped_after: int = 0
    message: str = ""


class AsyncRuntime:
    """An awaitable face over a :class:`~corvid_actors.runtime.Runtime` (see the module docstring).

    Args:
        runtime: the runtime to drive (also usable directly from other threads).
        max_workers: threads for the blocking calls (a call waits for a free one).
        owns_runtime: ``aclose()`` shuts the runtime down (default True).
    """

    def __init__(self, runtime: Runtime, *, max_workers: int = DEFAULT_WORKERS, owns_runtime: bool = True) -> None:
        self.runtime = runtime
        self._owns_runtime = owns_runtime
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="corvid-aio")
        self._closed = False

    @property
    def closed(self) -> bool:
        """True after :meth:`aclose`."""
        return self._closed

    @classmethod
    async def create(cls, *args: Any, max_workers: int = DEFAULT_WORKERS, **kwargs: Any) -> AsyncRuntime:
        """Build ``Runtime(*args, **kwargs)`` off the event loop (it opens the store and
        starts the actors) and wrap it."""
        loop = asyncio.get_running_loop()
        runtime = await loop.run_in_executor(None, functools.partial(Runtime, *args, **kwargs))
        return cls(runtime, max_workers=max_workers)

    async def run_blocking(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` on this runtime's threads: for blocking work without an
        awaitable here (a store read such as ``runtime.ensure_agent``, your own I/O).
        Cancelling the caller stops the waiting only, as for every method."""
        return await self._call(fn, *args, **kwargs)

    async def _call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        if self._closed:
            raise RuntimeStoppedError("the async runtime is closed")
        loop = asyncio.get_running_loop()
        # shielded: cancelling the caller must not cancel a call not yet picked up by a
        # thread — the request is either made or refused, never silently dropped
        call = loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))
        call.add_done_callback(_retrieve)  # a caller that stopped waiting leaves no "never retrieved" noise
        return await asyncio.shield(call)

    # --- sessions (the seed's ProcessManager API) --------------------------------------------

    async def create_session(self, **fields: Any) -> Any:  # the store's session row (peewee)
        return await self._call(self.runtime.create_session, **fields)

    async def start_process(self, session_id: str, prompt: UserContent | None = None) -> int | None:
        return await self._call(self.runtime.start_process, session_id, prompt)

    async def resume_process(self, session_id: str, prompt: UserContent | None = None) -> int | None:
        return await self._call(self.runtime.resume_process, session_id, prompt)

    async def stop_process(self, session_id: str, reason: str = "user_stop") -> None:
        await self._call(self.runtime.stop_process, session_id, reason)

    async def send_message(self, session_id: str, content: UserContent) -> bool:
        return bool(await self._call(self.runtime.send_message, session_id, content))

    async def is_running(self, session_id: str) -> bool:
        return bool(await self._call(self.runtime.is_running, session_id))

    async def get_active_session_ids(self) -> list[str]:
        return list(await self._call(self.runtime.get_active_session_ids))

    async def resume_session(self, session_id: str) -> bool:
        return bool(await self._call(self.runtime.resume_session, session_id))

    async def is_paused(self, session_id: str) -> bool:
        return bool(await self._call(self.runtime.is_paused, session_id))

    async def get_paused_session_ids(self) -> list[str]:
        return list(await self._call(self.runtime.get_paused_session_ids))

    async def extend_timeout(self, session_id: str, additional_s: float) -> bool:
        return bool(await self._call(self.runtime.extend_timeout, session_id, additional_s))

    async def get_memory_stats(self) -> dict[str, int]:
        return dict(await self._call(self.runtime.get_memory_stats))

    async def cleanup_session_state(self, session_id: str) -> None:
        await self._call(self.runtime.cleanup_session_state, session_id)

    async def session_info(self, session_id: str | None = None) -> dict[str, object]:
        return dict(await self._call(self.runtime.session_info, session_id))

    async def get_plan(self, session_id: str) -> list[dict[str, object]]:
        return list(await self._call(self.runtime.get_plan, session_id))

    async def resume_pending_sessions(self) -> list[str]:
        return list(await self._call(self.runtime.resume_pending_sessions))

    async def settle(self, timeout_s: float | None = 30.0) -> None:
        """``Runtime.settle`` without blocking the loop (tests, graceful hand-offs)."""
        await self._call(self.runtime.settle, timeout_s)

    # --- approvals ------------------------------------------------------------------------

    async def list_approvals(self, session_id: str | None = None) -> list[dict[str, object]]:
        return list(await self._call(self.runtime.list_approvals, session_id))

    async def resolve_approval(self, approval_id: str, behavior: str, message: str = "",
                               updated_input: dict[str, WireJson] | None = None) -> dict[str, str] | None:
        return await self._call(self.runtime.resolve_approval, approval_id, behavior, message, updated_input)

    async def set_approval_mode(self, mode: str) -> str:
        return str(await self._call(self.runtime.set_approval_mode, mode))

    async def approval_mode(self) -> str:
        return str(await self._call(self.runtime.approval_mode))

    # --- credits (Runtime(with_credits=True)) ------------------------------------------------

    async def grant_credits(self, participant: str, amount: int, *, type: str = "grant",
                            reference: str = "") -> int:
        return int(await self._call(self.runtime.grant_credits, participant, amount, type=type,
                                    reference=reference))

    async def credit_balance(self, participant: str) -> int:
        return int(await self._call(self.runtime.credit_balance, participant))

    async def credit_transactions(self, participant: str, limit: int = 10) -> list[dict[str, object]]:
        return list(await self._call(self.runtime.credit_transactions, participant, limit))

    async def open_credit_account(self, participant: str) -> Account:
        return await self._call(self.runtime.open_credit_account, participant)

    async def charge_turn(self, session_id: str) -> Deduction | None:
        return await self._call(self.runtime.charge_turn, session_id)

    # --- events ------------------------------------------------------------------------------

    def events(self, session_id: str, *, max_pending: int = DEFAULT_MAX_PENDING) -> EventStream[Event]:
        """``async with rt.events(sid) as stream: async for event in stream`` — the events of
        one session, across its restarts, until the block ends (or the stream overflows)."""
        return EventStream(self, session_id, max_pending)

    def all_events(self, *, max_pending: int = DEFAULT_MAX_PENDING) -> EventStream[tuple[str, Event]]:
        """Like :meth:`events` for every session: yields ``(session_id, event)`` pairs."""
        return EventStream(self, None, max_pending)

    # --- lifecycle -------------------------------------------------------------------------

    async def aclose(self, reason: str = "server_shutdown") -> None:
        """Shut the runtime down (when owned) off the loop, then release the threads. Idempotent."""
        if self._closed:
            return
        if self._owns_runtime:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self.runtime.shutdown, reason)
        self._closed = True
        self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_OPEN, _OVERFLOWED, _CLOSED = "open", "overflowed", "closed"


class EventStream(Generic[T]):
    """A bounded, coalescing subscription read with ``async for`` (see the module docstring).

    Filled on the EventBus thread (a non-blocking append under a lock, and at most one
    wake-up of the loop per wait); read on the event loop. One reader at a time.
    """

    def __init__(self, aruntime: AsyncRuntime, session_id: str | None, max_pending: int) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self._aruntime = aruntime
        self._session_id = session_id
        self.max_pending = max_pending
        self._lock = threading.Lock()
        self._buffer: deque[tuple[str, Event]] = deque()
        self._state = _CLOSED
        self._subscribed = False
        self._subscribing: asyncio.Future[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: how many deltas were merged into an earlier one, and items handed to the reader
        self.coalesced = 0
        self.delivered = 0

    @property
    def overflowed(self) -> bool:
        return self._state == _OVERFLOWED

    async def __aenter__(self) -> EventStream[T]:
        if self._subscribed:
            raise RuntimeError("this event stream is already open; open a new one with events()")
        self._loop = asyncio.get_running_loop()
        self._state = _OPEN
        self._subscribed = True
        subscribing = asyncio.ensure_future(
            self._aruntime._call(self._aruntime.runtime.subscribe_all, self._on_event))
        self._subscribing = subscribing
        try:
            await asyncio.shield(subscribing)
        except BaseException:
            # cancelled (or failed) while subscribing: leave nothing subscribed behind
            self._state = _CLOSED
            self._background(self._unsubscribe())
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop receiving and unsubscribe (idempotent; also what leaving the block does)."""
        with self._lock:
            self._state = _CLOSED
            self._buffer.clear()
            waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        if not self._subscribed:
            return
        self._subscribed = False
        subscribing = self._subscribing
        if subscribing is not None:
            try:
                await asyncio.shield(subscribing)  # unsubscribe only after the subscribe landed
            except Exception:  # noqa: BLE001 - the subscribe failed: nothing to undo
                return
        try:
            await self._aruntime._call(self._aruntime.runtime.unsubscribe_all, self._on_event)
        except RuntimeStoppedError:
            pass

    def __aiter__(self) -> EventStream[T]:
        return self

    async def __anext__(self) -> T:
        while True:
            with self._lock:
                if self._buffer:
                    session_id, event = self._buffer.popleft()
                    self.delivered += 1
                    return event if self._session_id is not None else (session_id, event)  # type: ignore[return-value]
                if self._state != _OPEN:
                    raise StopAsyncIteration
                assert self._loop is not None
                waiter = self._waiter = self._loop.create_future()
            await waiter

    # --- on the EventBus thread: never block, never call the runtime ---------------------------

    def _on_event(self, session_id: str, event: Event) -> None:
        if self._session_id is not None and session_id != self._session_id:
            return
        with self._lock:
            if self._state != _OPEN:
                return
            buffer = self._buffer
            if isinstance(event, ContentBlockDelta) and buffer:
                last_sid, last = buffer[-1]
                if last_sid == session_id and isinstance(last, ContentBlockDelta):
                    buffer[-1] = (session_id, ContentBlockDelta(text=last.text + event.text))
                    self.coalesced += 1
                    return
            if len(buffer) >= self.max_pending:
                self._state = _OVERFLOWED
                buffer.append((session_id, StreamOverflow(
                    max_pending=self.max_pending, dropped_after=self.delivered + len(buffer),
                    message=f"the reader fell {self.max_pending} events behind: the stream was closed; "
                            "open a new one and re-read the session's state")))
            else:
                buffer.append((session_id, event))
            overflowed = self._state == _OVERFLOWED
            waiter, self._waiter = self._waiter, None
        loop = self._loop
        if loop is None:
            return
        try:
            if waiter is not None:
                loop.call_soon_threadsafe(_wake, waiter)
            if overflowed:
                loop.call_soon_threadsafe(self._unsubscribe_soon)
        except RuntimeError:  # the loop is closed: nobody is reading any more
            with self._lock:
                self._state = _CLOSED

    def _unsubscribe_soon(self) -> None:
        # On the loop: the bus may not be asked from its own thread, so this runs from here.
        self._background(self._unsubscribe())

    @staticmethod
    def _background(coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        _BACKGROUND_TASKS.add(task)  # keep a reference until done (asyncio holds tasks weakly)
        task.add_done_callback(_BACKGROUND_TASKS.discard)


_BACKGROUND_TASKS: set[asyncio.Future[None]] = set()


def _retrieve(future: asyncio.Future[T]) -> None:
    if not future.cancelled():
        future.exception()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
