"""corvid_actors.aio — the runtime's face for asyncio programs (chat bots on asyncio clients).

    async with AsyncRuntime(Runtime(config)) as rt:
        session = await rt.create_session(agent_id=agent.id, source="chat")
        async with rt.events(session.id) as stream:
            await rt.start_process(session.id, "hello")
            async for event in stream:
                if event.type == "result":
                    break

How it relates to :class:`~corvid_actors.runtime.Runtime`: it *is* the same runtime. Every
public Runtime method has an awaitable twin of the same name, signature and docstring, run
on a small thread pool of its own (``run_in_executor``), because each one is an actor
``ask`` or a store query that blocks its caller. The event loop never waits on an actor, a
lock or the store; a threaded part of the program (an admin socket, a threaded chat
transport) may keep using the Runtime directly at the same time. The few methods without a
twin are listed in :data:`WITHOUT_TWIN` with what to do instead (event subscriptions are
:meth:`AsyncRuntime.events` streams; ``shutdown`` is :meth:`AsyncRuntime.aclose`); the
Runtime's properties (``config``, ``clock``, ``failure``, …) never block: read them on
``rt.runtime``.

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
import inspect
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Concatenate, Generic, ParamSpec, TypeVar

from corvid_actors.errors import RuntimeStoppedError
from corvid_actors.events import ContentBlockDelta, Event
from corvid_actors.runtime import Runtime

__all__ = ["AsyncRuntime", "EventStream", "StreamOverflow", "WITHOUT_TWIN", "DEFAULT_MAX_PENDING",
           "DEFAULT_WORKERS"]

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


#: The public Runtime methods AsyncRuntime has no twin for, each with what an asyncio program
#: does instead. Every other public Runtime method has one (tests/aio/test_twins.py).
WITHOUT_TWIN: Mapping[str, str] = MappingProxyType({
    "subscribe": "callbacks run on the EventBus thread: read `async with rt.events(session_id)` instead",
    "unsubscribe": "an events() stream unsubscribes itself when its `async with` block ends",
    "subscribe_all": "callbacks run on the EventBus thread: read `async with rt.all_events()` instead",
    "unsubscribe_all": "an all_events() stream unsubscribes itself when its `async with` block ends",
    "shutdown": "`await rt.aclose(...)` (the same parameters) shuts down off the loop and releases the threads",
})


def _twin(method: Callable[Concatenate[Runtime, P], R]) -> Callable[Concatenate[AsyncRuntime, P], Coroutine[Any, Any, R]]:
    """The awaitable twin of a Runtime method: the same signature and docstring (for
    ``inspect``, ``help()`` and mypy), its call made on the AsyncRuntime's threads."""
    name = method.__name__

    async def call(self: AsyncRuntime, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, R] = getattr(self.runtime, name)  # by name: a Runtime subclass's override
        return await self._call(bound, *args, **kwargs)

    # __wrapped__ (set here) gives inspect.signature and typing.get_type_hints the Runtime's
    # parameters, resolved in the Runtime's module
    functools.update_wrapper(call, method)
    call.__module__ = __name__
    call.__qualname__ = f"AsyncRuntime.{name}"
    summary = (f"Awaitable twin of ``Runtime.{name}``: the call runs on this AsyncRuntime's threads,\n"
               "off the event loop; cancelling the awaiting task stops the waiting only.")
    call.__doc__ = f"{inspect.cleandoc(method.__doc__)}\n\n{summary}" if method.__doc__ else summary
    return call


class AsyncRuntime:
    """An awaitable face over a :class:`~corvid_actors.runtime.Runtime` (see the module docstring).

    Its twins are one line each, ``name = _twin(Runtime.name)``: the Runtime method is the
    single source of the signature (mypy and ``inspect.signature`` see the same one) and of
    the docstring. ``tests/aio/test_twins.py`` fails when a public Runtime method has
    neither a twin nor an entry in :data:`WITHOUT_TWIN`.

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
        """``fn(*args, **kwargs)`` on this runtime's threads: for blocking work without a
        twin here (your own I/O, a ``ChatBridge``'s methods).
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

    # --- the twins: one line per public Runtime method (tests/aio/test_twins.py) --------------
    # sessions (the seed's ProcessManager API)
    create_session = _twin(Runtime.create_session)
    start_process = _twin(Runtime.start_process)
    resume_process = _twin(Runtime.resume_process)
    stop_process = _twin(Runtime.stop_process)
    send_message = _twin(Runtime.send_message)
    is_running = _twin(Runtime.is_running)
    get_active_session_ids = _twin(Runtime.get_active_session_ids)
    resume_session = _twin(Runtime.resume_session)
    is_paused = _twin(Runtime.is_paused)
    get_paused_session_ids = _twin(Runtime.get_paused_session_ids)
    extend_timeout = _twin(Runtime.extend_timeout)
    get_memory_stats = _twin(Runtime.get_memory_stats)
    cleanup_session_state = _twin(Runtime.cleanup_session_state)
    session_info = _twin(Runtime.session_info)
    get_plan = _twin(Runtime.get_plan)
    get_tool_outputs = _twin(Runtime.get_tool_outputs)
    resume_pending_sessions = _twin(Runtime.resume_pending_sessions)
    resume_all = _twin(Runtime.resume_all)
    take_restart_pending = _twin(Runtime.take_restart_pending)
    # stored agents, projects, sessions and messages
    create_agent = _twin(Runtime.create_agent)
    ensure_agent = _twin(Runtime.ensure_agent)
    update_agent = _twin(Runtime.update_agent)
    agent = _twin(Runtime.agent)
    agents = _twin(Runtime.agents)
    add_mcp_server = _twin(Runtime.add_mcp_server)
    create_project = _twin(Runtime.create_project)
    project = _twin(Runtime.project)
    session = _twin(Runtime.session)
    find_session = _twin(Runtime.find_session)
    history = _twin(Runtime.history)
    message_count = _twin(Runtime.message_count)
    # one tool run
    run_tool = _twin(Runtime.run_tool)
    # approvals, slots
    list_approvals = _twin(Runtime.list_approvals)
    resolve_approval = _twin(Runtime.resolve_approval)
    set_approval_mode = _twin(Runtime.set_approval_mode)
    approval_mode = _twin(Runtime.approval_mode)
    slot_stats = _twin(Runtime.slot_stats)
    # credits (Runtime(with_credits=True))
    grant_credits = _twin(Runtime.grant_credits)
    credit_balance = _twin(Runtime.credit_balance)
    credit_transactions = _twin(Runtime.credit_transactions)
    open_credit_account = _twin(Runtime.open_credit_account)
    charge_turn = _twin(Runtime.charge_turn)
    # who may talk to an agent, for how much
    agent_access = _twin(Runtime.agent_access)
    spend = _twin(Runtime.spend)
    check_budget = _twin(Runtime.check_budget)
    # providers, sandbox, hosts' hooks
    route = _twin(Runtime.route)
    has_provider = _twin(Runtime.has_provider)
    provider = _twin(Runtime.provider)
    sandbox_status = _twin(Runtime.sandbox_status)
    replay_store = _twin(Runtime.replay_store)
    work_tracker = _twin(Runtime.work_tracker)
    # lifecycle and root policy (shutdown's twin is aclose)
    settle = _twin(Runtime.settle)
    stop_sessions = _twin(Runtime.stop_sessions)
    mark_stopping = _twin(Runtime.mark_stopping)
    watch = _twin(Runtime.watch)
    add_fatal_listener = _twin(Runtime.add_fatal_listener)

    # --- events ------------------------------------------------------------------------------

    def events(self, session_id: str, *, max_pending: int = DEFAULT_MAX_PENDING) -> EventStream[Event]:
        """``async with rt.events(sid) as stream: async for event in stream`` — the events of
        one session, across its restarts, until the block ends (or the stream overflows)."""
        return EventStream(self, session_id, max_pending)

    def all_events(self, *, max_pending: int = DEFAULT_MAX_PENDING) -> EventStream[tuple[str, Event]]:
        """Like :meth:`events` for every session: yields ``(session_id, event)`` pairs."""
        return EventStream(self, None, max_pending)

    # --- lifecycle -------------------------------------------------------------------------

    async def aclose(self, reason: str = "server_shutdown", *, settle_timeout_s: float = 10.0) -> None:
        """``Runtime.shutdown`` off the loop (when the runtime is owned), then release the
        threads. Idempotent."""
        if self._closed:
            return
        if self._owns_runtime:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, functools.partial(
                self.runtime.shutdown, reason, settle_timeout_s=settle_timeout_s))
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
        """Whether the stream ended because ``max_pending`` items were waiting (its reader then got a
        ``stream_overflow`` event)."""
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
