"""The runtime's I/O loop: one asyncio event loop, on one thread, for every model stream.

A thread per in-flight model call does not scale: with a thousand sessions streaming, a
thousand threads fight for the GIL and each chunk costs hundreds of microseconds (issue 18).
So model calls of providers that speak asyncio (``astream``: the Ollama and Anthropic
providers, through ``ollama.AsyncClient`` and ``anthropic.AsyncAnthropic``) run as tasks on
one event loop owned by the Runtime. A session actor starts a call with :meth:`IoLoop.submit`
and gets an :class:`IoCall` whose :meth:`~IoCall.cancel` (thread-safe) cancels the task: the
HTTP stream is closed at its current ``await``, so the server sees the disconnect. The
call's outcome reaches ``on_done`` on the loop thread, which tells the actor (a message).

Work accounting: ``begin``/``end`` (the runtime's ActivityTracker) count each call from
:meth:`~IoLoop.submit` until its ``on_done`` has run, so ``Runtime.settle()`` waits for it.

Loop resources (an async HTTP client with its connection pool) are made on the loop thread
with :meth:`IoLoop.resource` and closed when the loop stops. Tools keep their own threads
and subprocesses; only model I/O runs here.

The loop keeps real time, also in a simulation: model I/O is real I/O, so its timers (an
HTTP client's timeouts, the delta pump's interval) run on ``CLOCK_MONOTONIC`` even while a
:class:`~corvid_actors.testing.SimClock` has frozen ``time.monotonic`` (freezegun patches
that function, which asyncio's ``loop.time()`` reads; it leaves ``clock_gettime`` alone).
Outside a simulation both are the same clock.

This module imports nothing from the package (it sits beside the clock).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from loguru import logger

T = TypeVar("T")
#: ``on_done(result, error)``: exactly one of them is set; error is the call's exception
#: (``asyncio.CancelledError`` when it was cancelled)
DoneCallback = Callable[[Any, BaseException | None], None]

_current = threading.local()


class IoLoopStopped(RuntimeError):
    """A call was submitted to an I/O loop that is not running (stopped, or never started)."""


class IoCall:
    """One submitted call: :meth:`cancel` it from any thread."""

    __slots__ = ("_loop", "_task", "_cancelled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False

    def cancel(self) -> None:
        """Cancel the call (thread-safe, idempotent): its task gets ``CancelledError`` at
        its current ``await`` (an HTTP read: the stream is closed); ``on_done`` still runs."""
        if self._cancelled:
            return
        self._cancelled = True
        try:
            self._loop.call_soon_threadsafe(self._cancel_on_loop)
        except RuntimeError:  # the loop is closed: the call ended with it
            pass

    def _cancel_on_loop(self) -> None:
        if self._task is not None:
            self._task.cancel()


class IoLoop(Generic[T]):
    """One event-loop thread for model I/O (see the module docstring).

    ``begin()``/``end()`` are told when a call starts counting and when it is done
    (the runtime's tracker; no-ops by default). :meth:`start` and :meth:`stop` are called
    by the Runtime (start before any session, stop after every session stopped).
    """

    def __init__(self, *, begin: Callable[[], None] | None = None, end: Callable[[], None] | None = None,
                 name: str = "corvid-io") -> None:
        self._begin = begin or (lambda: None)
        self._end = end or (lambda: None)
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._resources: dict[Hashable, tuple[Any, Callable[[Any], Awaitable[None]] | None]] = {}
        self._lock = threading.Lock()
        self._stopping = False
        #: calls submitted and finished (stats, tests)
        self.submitted = 0
        self.finished = 0

    @property
    def running(self) -> bool:
        return self._loop is not None and not self._stopping

    @property
    def thread(self) -> threading.Thread | None:
        """The loop's thread (None before :meth:`start`)."""
        return self._thread

    @property
    def in_flight(self) -> int:
        """Calls submitted and not finished yet."""
        return self.submitted - self.finished

    @staticmethod
    def current() -> IoLoop[Any] | None:
        """The I/O loop whose thread is calling (None on any other thread)."""
        loop: IoLoop[Any] | None = getattr(_current, "io_loop", None)
        return loop

    def start(self) -> None:
        """Start the loop's thread (returns once the loop runs)."""
        with self._lock:
            if self._thread is not None:
                return
            ready = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(ready,), name=self._name, daemon=True)
            self._thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        loop = RealTimeEventLoop()  # see the module docstring
        _current.io_loop = self
        self._loop = loop
        asyncio.set_event_loop(loop)
        ready.set()
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    def submit(self, make: Callable[[], Awaitable[T]], on_done: DoneCallback) -> IoCall:
        """Run the coroutine ``make()`` as a task on the loop; ``on_done(result, error)``
        runs on the loop thread when it ends (a result, its exception, or
        ``CancelledError``). Thread-safe. Raises :class:`IoLoopStopped` when the loop is
        not running (``on_done`` is then not called)."""
        loop = self._loop
        if loop is None or self._stopping:
            raise IoLoopStopped("the I/O loop is not running")
        call = IoCall(loop)
        self._begin()
        with self._lock:
            self.submitted += 1

        def launch() -> None:
            if call._cancelled or self._stopping:
                self._finish(on_done, None, asyncio.CancelledError())
                return
            task = loop.create_task(_guarded(make))
            call._task = task
            self._tasks.add(task)
            task.add_done_callback(lambda t: self._task_done(t, on_done))

        try:
            loop.call_soon_threadsafe(launch)
        except RuntimeError as exc:  # closed between the check and now
            self._end()
            raise IoLoopStopped("the I/O loop is not running") from exc
        return call

    def _task_done(self, task: asyncio.Task[Any], on_done: DoneCallback) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            self._finish(on_done, None, asyncio.CancelledError())
        elif (error := task.exception()) is not None:
            self._finish(on_done, None, error)
        else:
            self._finish(on_done, task.result(), None)

    def _finish(self, on_done: DoneCallback, result: Any, error: BaseException | None) -> None:
        try:
            on_done(result, error)
        except Exception:  # noqa: BLE001 - a callback must not break the loop
            logger.opt(exception=True).error("an I/O loop completion callback raised")
        finally:
            with self._lock:
                self.finished += 1
            self._end()

    def resource(self, key: Hashable, make: Callable[[], T], close: Callable[[T], Awaitable[None]] | None = None) -> T:
        """The loop's resource under ``key`` (an async client), made by ``make()`` the first
        time; closed with ``await close(it)`` when the loop stops. Loop thread only."""
        found = self._resources.get(key)
        if found is None:
            found = (make(), close)
            self._resources[key] = found
        value: T = found[0]
        return value

    def stop(self) -> None:
        """Cancel what is in flight (each ``on_done`` runs), close the resources, end the
        thread. Blocks until then; idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or self._stopping:
            return
        self._stopping = True
        done = threading.Event()

        async def wind_down() -> None:
            try:
                tasks = list(self._tasks)
                for task in tasks:
                    task.cancel()
                if tasks:
                    await asyncio.gather(*tasks, return_exceptions=True)
                for value, close in self._resources.values():
                    if close is not None:
                        try:
                            await close(value)
                        except Exception:  # noqa: BLE001 - closing a client at shutdown
                            logger.opt(exception=True).debug("closing an I/O loop resource failed")
                self._resources.clear()
            finally:
                done.set()
                loop.stop()

        asyncio.run_coroutine_threadsafe(wind_down(), loop)
        if threading.current_thread() is not thread:
            done.wait()
            thread.join()


class RealTimeEventLoop(asyncio.SelectorEventLoop):
    """An event loop whose timers keep real time (``CLOCK_MONOTONIC``) even while a
    :class:`~corvid_actors.testing.SimClock`'s freezegun has frozen ``time.monotonic``, which
    asyncio's own ``time()`` reads. Every loop of the package that does real I/O runs on it:
    the runtime's I/O loop, the MCP clients' loop, the HTTP listener and the chat webhook
    server (their timeouts, keep-alives and heartbeats are real seconds)."""

    def time(self) -> float:
        return time.clock_gettime(time.CLOCK_MONOTONIC)


async def _guarded(make: Callable[[], Awaitable[T]]) -> T:
    return await make()
