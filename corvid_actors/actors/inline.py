"""The inline dispatcher: an actor's messages run on the thread that waits for them.

The seam :class:`~corvid_actors.actors.base.TrackedActor` and
:class:`~corvid_actors.actors.base.ActivityTracker` use in simulations
(``ActivityTracker(dispatcher="inline")``): the dispatcher, the inbox of an actor without
a thread, and the Pykka future whose ``get`` runs the dispatcher. Real-clock runtimes keep
a Pykka thread per actor; nothing here runs for them.

What the dispatcher uses of the tracker and of an actor is named here, as the protocols
:class:`InlineHost` and :class:`InlineActor` (``actors/base.py`` implements both and
imports this module; this module does not import it back).
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import pykka
from pykka._threading import ThreadingFuture

from corvid_actors.errors import SettleTimeout


class InlineHost(Protocol):
    """The work accounting the inline dispatcher runs against (``ActivityTracker`` is one).
    Every member is used with the lock the dispatcher was given held."""

    #: worker threads running now (not parked on the simulated clock)
    workers: int

    @property
    def on_worker(self) -> bool:
        """Is the calling thread one of the workers?"""
        ...

    @property
    def busy(self) -> int:
        """Items in flight."""
        ...

    def begin_locked(self) -> None:
        """One more item in flight (a message put into an inbox)."""
        ...

    def wake(self) -> None:
        """Wake the threads waiting in :meth:`wait_for_change`."""
        ...

    def wait_for_change(self, timeout_s: float | None) -> bool:
        """Wait until :meth:`wake` or ``timeout_s`` real seconds; False on the timeout."""
        ...


class InlineActor(Protocol):
    """An actor the inline dispatcher runs (``TrackedActor`` is one): its side of the
    pair, private to the two modules."""

    #: in the dispatcher's run queue now (read and written with the host's lock held)
    _inline_queued: bool

    def _inline_step(self) -> None:
        """Handle the actor's next message."""
        ...

    def _inline_inbox_has_more(self) -> bool:
        """Whether the actor has another message to handle."""
        ...


class InlineDispatcher:
    """Runs every actor's messages on the thread that waits for them (simulations).

    Under it, a ``TrackedActor`` has no thread: a message put into its inbox makes the
    actor *ready*, and the thread that waits — ``Runtime.settle()`` (so ``SimClock.advance``
    after each timer), or an ``ask`` — takes ready actors one message at a time and handles
    it, until what it waits for holds. The order is deterministic: ready actors in the order
    they became ready, each handling one message before the next actor's turn. With
    ``explore=True`` the next actor is picked among the ready ones by a
    ``random.Random(seed)`` (each actor's own messages stay in their order): one scenario
    runs under many interleavings, and a seed replays one.

    While a worker thread runs (``run_tracked``: a build, a model call on a worker, a tool;
    not while it is parked on the simulated clock), no message is handled: what the worker
    tells lands at a deterministic point. A worker that waits for a message itself may
    still ask (its own ask is handled). One thread drains at a time. A message told from another thread (a worker, a tool, the
    I/O loop) joins the run queue and counts as work in flight, so ``settle`` waits for it;
    an ``ask`` from such a thread is handled by the draining thread, or by the asking thread
    itself when nobody drains. A handler that asks another actor drains re-entrantly (an
    actor whose handler is on the stack is skipped until it returns).
    Supervision is the same as with threads: a told message that raises stops a plain
    actor (``survive_errors`` actors go on), asks get their exception, and the tracker's
    ``on_actor_exit`` hears of every actor that ends.

    ``host`` is the tracker and ``lock`` its lock: one lock for the work count and the run
    queue.
    """

    def __init__(self, host: InlineHost, lock: threading.RLock, *, seed: int | None = None,
                 explore: bool = False) -> None:
        self.host = host
        self.lock = lock
        self._ready: deque[InlineActor] = deque()
        self._on_stack: set[int] = set()
        self._owner: threading.Thread | None = None
        self._depth = 0
        self.seed = seed
        self._rng = random.Random(seed) if explore else None
        #: messages handled (stats, benchmarks)
        self.handled = 0
        #: ``(actor class name, message type name)`` per handled message when recording (tests)
        self.trace: list[tuple[str, str]] | None = None

    @property
    def explores(self) -> bool:
        return self._rng is not None

    def make_ready(self, actor: InlineActor) -> None:
        """``actor`` has a message (called with the tracker's lock held)."""
        if not actor._inline_queued:
            actor._inline_queued = True
            self._ready.append(actor)
        self.host.wake()

    def run_until(self, done: Callable[[], bool], timeout_s: float | None = None, *, what: str = "wait") -> None:
        """Handle ready actors' messages on this thread until ``done()`` (checked under the
        tracker's lock). ``timeout_s``: real seconds without any progress → SettleTimeout."""
        me = threading.current_thread()
        while True:
            with self.lock:
                if done():
                    return
                # while a worker runs, its tells are still coming: wait for it to end or park
                # (a worker waiting for an answer itself does not hold the others up)
                workers_running = self.host.workers
                if workers_running and self.host.on_worker:  # (a thread-local read: only if any)
                    workers_running -= 1
                actor = self._pick() if self._owner in (None, me) and workers_running <= 0 else None
                if actor is None:
                    # nothing this thread may run now: another thread drains, or only
                    # workers are busy; both notify when something changes
                    if not self.host.wait_for_change(timeout_s):
                        raise SettleTimeout(f"runtime still busy after {timeout_s}s without progress "
                                            f"({self.host.busy} items in flight, {what})")
                    continue
                self._owner = me
                self._depth += 1
                self._on_stack.add(id(actor))
            try:
                actor._inline_step()
            finally:
                with self.lock:
                    self._on_stack.discard(id(actor))
                    self._depth -= 1
                    if self._depth == 0:
                        self._owner = None
                    if actor._inline_inbox_has_more():
                        self._ready.append(actor)
                    else:
                        actor._inline_queued = False
                    self.host.wake()

    def _pick(self) -> InlineActor | None:
        # under the lock
        ready = self._ready
        if not ready:
            return None
        if self._rng is None:
            for i, actor in enumerate(ready):
                if id(actor) not in self._on_stack:
                    del ready[i]
                    return actor
            return None
        eligible = [i for i, actor in enumerate(ready) if id(actor) not in self._on_stack]
        if not eligible:
            return None
        i = eligible[self._rng.randrange(len(eligible))]
        actor = ready[i]
        del ready[i]
        return actor


class _PumpFuture(ThreadingFuture[Any]):
    """A Pykka future whose ``get`` runs the inline dispatcher until it is set (the ask's
    target has no thread of its own). Under the thread dispatcher it is a ThreadingFuture."""

    dispatcher: InlineDispatcher | None = None

    def get(self, *, timeout: float | None = None) -> Any:
        dispatcher = self.dispatcher
        if dispatcher is not None and self._get_hook is None:
            dispatcher.run_until(lambda: self._result is not None, timeout, what="ask")
        return super().get(timeout=timeout)


class _InlineInbox:
    """The inbox of an actor under the inline dispatcher: its messages, in order; putting
    one counts it as work in flight and makes the actor ready."""

    def __init__(self, dispatcher: InlineDispatcher) -> None:
        self._host = dispatcher.host
        self._lock = dispatcher.lock
        self.dispatcher = dispatcher
        self.items: deque[Any] = deque()
        self.actor: InlineActor | None = None
        self.closed = False
        self.current_is_ask = False

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        reply_to = getattr(item, "reply_to", None)
        if isinstance(reply_to, _PumpFuture):
            reply_to.dispatcher = self.dispatcher
        with self._lock:
            self.items.append(item)
            if self.closed:
                # the actor is gone: nothing will handle it (an ask gets ActorDeadError now)
                self.items.pop()
                if reply_to is not None:
                    reply_to.set_exception(exc_info=(pykka.ActorDeadError, pykka.ActorDeadError(
                        "the actor stopped before handling the message"), None))
                return
            self._host.begin_locked()
            assert self.actor is not None
            self.dispatcher.make_ready(self.actor)

    def empty(self) -> bool:
        return not self.items


class _Setup:
    """The first item of an inline actor's inbox: run its ``on_start``."""
