"""What every corvid actor shares: exact work accounting for ``Runtime.settle()``.

Pykka has no idle detection, so each runtime owns an :class:`ActivityTracker`: a counter
of work in flight. Every message put into a tracked actor's inbox counts until the actor
has *finished* handling it (the inbox learns that when the actor asks for its next
message, or when it tears down); every worker thread counts while it runs and stops
counting while it is parked on the simulated clock. ``settle()`` waits for zero.

The inbox hook is Pykka's ``_create_actor_inbox`` (internal: pykka is pinned to 4.5.x).

Supervision (issue 16): Pykka stops an actor whose *told* message raised. A core actor
(``survive_errors = True``: slot pool, approval broker, credit bank, event bus, store
watch, admin) instead logs the error and goes on with its next message — one bad message never
kills it (:meth:`TrackedActor.on_message_error` is its hook). An *asked* message that
raises still hands the exception to the asker, as in Pykka. Whatever ends an actor's
thread (a stop, a failure), the tracker's ``on_actor_exit`` hears of it: the Runtime's
root policy (:mod:`corvid_actors.runtime`).

A collaborator that must see this accounting — the simulated clock, which parks workers
and settles the runtime after each timer it fires — is :class:`ActivityAware`; the
Runtime hands it the tracker and its ``settle``. The :class:`~corvid_actors.clock.Clock`
protocol itself knows nothing of actors.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

import pykka
from loguru import logger
from pykka import messages as pykka_messages

from corvid_actors.actors.inline import InlineDispatcher, _InlineInbox, _PumpFuture, _Setup
from corvid_actors.errors import SettleTimeout

DispatcherKind = Literal["threads", "inline"]


class ActivityTracker:
    """Counts work in flight across one runtime's actors and workers.

    ``dispatcher`` says how the runtime's actors run their messages: ``"threads"`` (a
    Pykka thread per actor: real-clock runtimes) or ``"inline"`` (an
    :class:`InlineDispatcher`: simulations; see its docstring). ``seed`` and ``explore``
    go to the inline dispatcher.
    """

    def __init__(self, dispatcher: DispatcherKind = "threads", *, seed: int | None = None,
                 explore: bool = False) -> None:
        # The lock is entered directly on the hot paths (a C call; the Condition's own
        # ``with`` is a Python-level wrapper), and the condition is notified only when a
        # thread waits on it: under the inline dispatcher every message took and
        # notified it several times with nobody waiting (issue 18 item 4).
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        #: threads waiting on ``_cond`` now (changed and read under ``_lock``)
        self._waiting = 0
        self._busy = 0
        #: worker threads running now (not parked on the simulated clock): the inline
        #: dispatcher runs no message meanwhile, so what a worker tells lands in order
        self.workers = 0
        self._worker_local = threading.local()
        #: the inline dispatcher, or None when every actor has its own thread
        self.inline: InlineDispatcher | None = None
        if dispatcher == "inline":
            self.inline = InlineDispatcher(self, self._lock, seed=seed, explore=explore)
        elif dispatcher != "threads":
            raise ValueError(f"dispatcher must be 'threads' or 'inline' (got {dispatcher!r})")
        elif explore:
            raise ValueError("explore=True needs the inline dispatcher")
        #: ``on_actor_exit(ref, failed)`` when a tracked actor's thread ends (the root policy)
        self.on_actor_exit: Callable[[pykka.ActorRef[Any], bool], None] | None = None
        #: set by the runtime's shutdown: actors stopping now is expected, not a fault
        self.stopping = False
        #: ``on_message_error(ref, message, error)`` after a ``survive_errors`` actor skipped a
        #: told message that raised (the runtime tells the session concerned)
        self.on_message_error: Callable[[pykka.ActorRef[Any], Any, Exception], None] | None = None

    @property
    def busy(self) -> int:
        return self._busy

    def begin(self, n: int = 1) -> None:
        with self._lock:
            self._busy += n

    def begin_locked(self) -> None:
        """One more item in flight, for a caller that holds the lock (an inline inbox's put)."""
        self._busy += 1

    def end(self, n: int = 1) -> None:
        with self._lock:
            self._busy -= n
            if self._busy < 0:  # pragma: no cover - a bookkeeping bug; make it loud
                logger.error("activity tracker went negative ({})", self._busy)
                self._busy = 0
            if self._busy == 0 and self._waiting:
                self._cond.notify_all()

    def wake(self) -> None:
        """Wake every thread waiting for a change (call with ``_lock`` held): none is
        woken when none waits, which is the rule under the inline dispatcher."""
        if self._waiting:
            self._cond.notify_all()

    def wait_for_change(self, timeout_s: float | None) -> bool:
        """Wait (with ``_lock`` held) until :meth:`wake` or ``timeout_s`` real seconds;
        False on the timeout."""
        self._waiting += 1
        try:
            return self._cond.wait(timeout_s)
        finally:
            self._waiting -= 1

    def wait_idle(self, timeout_s: float | None = None) -> None:
        """Block until nothing is in flight. ``timeout_s`` is real seconds (a safety net).

        With the inline dispatcher, the calling thread runs the actors' messages meanwhile
        (``settle`` drains the run queue); ``timeout_s`` then bounds a wait in which
        nothing happens."""
        if self.inline is not None:
            self.inline.run_until(lambda: self._busy == 0, timeout_s, what="settle")
            return
        with self._lock:
            self._waiting += 1
            try:
                idle = self._cond.wait_for(lambda: self._busy == 0, timeout=timeout_s)
            finally:
                self._waiting -= 1
            if not idle:
                raise SettleTimeout(f"runtime still busy after {timeout_s}s ({self._busy} items in flight)")

    @property
    def on_worker(self) -> bool:
        """Is the calling thread a worker started by :meth:`run_tracked`?"""
        return bool(getattr(self._worker_local, "is_worker", False))

    def park(self) -> bool:
        """The calling thread stops counting while parked on the simulated clock; returns
        whether it was a running worker (give it to :meth:`unpark`)."""
        worker = self.on_worker
        with self._lock:
            if worker:
                self.workers -= 1
            self.wake()
        self.end()
        return worker

    def unpark(self, worker: bool) -> None:
        """A parked thread is woken (called on the thread that wakes it)."""
        with self._lock:
            self._busy += 1
            if worker:
                self.workers += 1

    def run_tracked(self, target: Callable[[], None], name: str, *,
                    never_parks: bool = False) -> threading.Thread | None:
        """Start a worker thread whose whole run counts as work in flight.

        ``never_parks``: ``target`` never waits on the simulated clock (a build, a health
        probe, closing resources). Under the inline dispatcher it then runs at once on the
        calling thread instead (no thread; returns None): the dispatcher would run nothing
        else while the worker ran anyway, so the order of everything is the same."""
        if never_parks and self.inline is not None:
            try:
                target()
            except Exception:  # noqa: BLE001 - as a worker's last resort below
                logger.exception("worker {} failed", name)
            return None
        with self._lock:
            self._busy += 1
            self.workers += 1

        def body() -> None:
            self._worker_local.is_worker = True
            try:
                target()
            except Exception:  # noqa: BLE001 - workers report their own errors; this is a last resort
                logger.exception("worker {} failed", name)
            finally:
                with self._lock:
                    self.workers -= 1
                    self.wake()
                self.end()

        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        return thread


@runtime_checkable
class ActivityAware(Protocol):
    """A collaborator of the Runtime (the simulated clock) that needs its work accounting.

    The Runtime calls :meth:`attach` once, on the constructing thread, before any actor
    starts: ``tracker`` counts work in flight (a worker parked in simulated time stops
    counting), ``settle()`` blocks until nothing is in flight. A real clock is not
    ActivityAware: real time moves on its own.
    """

    def attach(self, tracker: ActivityTracker, settle: Callable[[], None]) -> None: ...


class _TrackingInbox(queue.Queue[Any]):
    """An actor inbox that reports each message to the tracker until it is handled."""

    def __init__(self, tracker: ActivityTracker) -> None:
        super().__init__()
        self._tracker = tracker
        self._guard = threading.Lock()
        self._in_progress = False
        self._closed = False
        #: the message being handled was asked (its exception goes to the asker)
        self.current_is_ask = False

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with self._guard:
            if not self._closed:
                self._tracker.begin()
            super().put(item, block, timeout)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self._finish_current()
        item = super().get(block, timeout)
        self._in_progress = True
        self.current_is_ask = getattr(item, "reply_to", None) is not None
        return item

    def empty(self) -> bool:
        # Only Pykka's teardown asks: the message being handled is done, and once the
        # inbox is drained nothing put later will ever be handled, so stop counting.
        self._finish_current()
        with self._guard:
            is_empty = super().empty()
            if is_empty:
                self._closed = True
            return is_empty

    def _finish_current(self) -> None:
        if self._in_progress:
            self._in_progress = False
            self._tracker.end()


class TrackedActor(pykka.ThreadingActor):
    """A Pykka actor whose inbox reports to the runtime's :class:`ActivityTracker`.

    Actors run on daemon threads so a wedged actor cannot keep the interpreter alive;
    the Runtime stops every actor explicitly on shutdown.
    """

    use_daemon_thread = True
    #: a told message that raises is logged and skipped instead of stopping the actor
    survive_errors = False

    def __init__(self, tracker: ActivityTracker) -> None:
        self._tracker = tracker
        self._failed = False
        self._inline_queued = False
        super().__init__()

    def _create_actor_inbox(self) -> Any:  # type: ignore[override]
        if self._tracker.inline is not None:
            inbox = _InlineInbox(self._tracker.inline)
            inbox.actor = self
            return inbox
        return _TrackingInbox(self._tracker)

    @staticmethod
    def _create_future() -> Any:
        return _PumpFuture()

    def _start_actor_loop(self) -> None:
        inbox = self.actor_inbox
        if not isinstance(inbox, _InlineInbox):
            super()._start_actor_loop()
            return
        inbox.items.appendleft(_Setup())  # on_start runs first, on the draining thread
        with self._tracker._lock:
            self._tracker._busy += 1
            assert self._tracker.inline is not None
            self._tracker.inline.make_ready(self)

    # --- the inline dispatcher's side (InlineDispatcher.run_until, on the draining thread)

    def _inline_inbox_has_more(self) -> bool:
        inbox = self.actor_inbox
        return isinstance(inbox, _InlineInbox) and bool(inbox.items) and not inbox.closed

    def _inline_step(self) -> None:
        """Handle this actor's next message (Pykka's actor loop, one message at a time)."""
        inbox = self.actor_inbox
        assert isinstance(inbox, _InlineInbox)
        with self._tracker._lock:
            if not inbox.items or inbox.closed:
                return
            envelope = inbox.items.popleft()
        dispatcher = inbox.dispatcher
        dispatcher.handled += 1
        if dispatcher.trace is not None:
            dispatcher.trace.append((type(self).__name__, type(getattr(envelope, "message", envelope)).__name__))
        try:
            if isinstance(envelope, _Setup):
                self._actor_loop_setup()
            elif not self.actor_stopped.is_set():
                self._inline_handle(envelope)
        finally:
            self._tracker.end()
        if self.actor_stopped.is_set():
            self._inline_teardown()

    def _inline_handle(self, envelope: Any) -> None:
        inbox = self.actor_inbox
        assert isinstance(inbox, _InlineInbox)
        inbox.current_is_ask = envelope.reply_to is not None
        try:
            response = self._handle_receive(envelope.message)
            if envelope.reply_to is not None:
                envelope.reply_to.set(response)
        except Exception:
            if envelope.reply_to is not None:
                envelope.reply_to.set_exception()
            else:
                self._handle_failure(*sys.exc_info())
                try:
                    self.on_failure(*sys.exc_info())
                except Exception:  # noqa: BLE001 - as Pykka's loop does
                    self._handle_failure(*sys.exc_info())
        except BaseException:  # noqa: BLE001 - as Pykka's loop does: stop everything
            self._stop()
            pykka.ActorRegistry.stop_all()

    def _inline_teardown(self) -> None:
        inbox = self.actor_inbox
        assert isinstance(inbox, _InlineInbox)
        with self._tracker._lock:
            if inbox.closed:
                return
            inbox.closed = True
            left, inbox.items = list(inbox.items), deque()
        for envelope in left:
            if not isinstance(envelope, _Setup) and envelope.reply_to is not None:
                if isinstance(envelope.message, pykka_messages._ActorStop):
                    envelope.reply_to.set(None)
                else:
                    envelope.reply_to.set_exception(exc_info=(pykka.ActorDeadError, pykka.ActorDeadError(
                        f"{self.actor_ref} stopped before handling the message"), None))
        if left:
            self._tracker.end(len(left))
        self._report_exit()

    def _report_exit(self) -> None:
        """Tell the tracker's ``on_actor_exit`` (the root policy) that this actor ended."""
        listener = self._tracker.on_actor_exit
        if listener is not None:
            try:
                listener(self.actor_ref, self._failed)
            except Exception:  # noqa: BLE001 - the actor is gone either way
                logger.opt(exception=True).error("on_actor_exit for {} raised", type(self).__name__)

    @property
    def handling_ask(self) -> bool:
        """The message being handled was asked: an exception goes back to the asker.
        Only meaningful on the actor's own thread."""
        inbox = self.actor_inbox
        return isinstance(inbox, (_TrackingInbox, _InlineInbox)) and inbox.current_is_ask

    def _handle_receive(self, message: Any) -> Any:
        if not self.survive_errors or self.handling_ask:
            return super()._handle_receive(message)
        try:
            return super()._handle_receive(message)
        except Exception as exc:  # noqa: BLE001 - per-message supervision: see the module docstring
            try:
                self.on_message_error(message, exc)
            except Exception:  # noqa: BLE001 - the hook itself must not kill the actor either
                logger.opt(exception=True).error("{}: on_message_error raised", type(self).__name__)
            return None

    def on_message_error(self, message: Any, error: Exception) -> None:
        """A told ``message`` raised ``error`` (only for ``survive_errors`` actors): log it
        and hand it to the tracker's ``on_message_error`` (the runtime publishes an event on
        the session the message names). Override to do more (a retry through the timer table)."""
        logger.opt(exception=error).error("{} could not handle {}: {}; the actor goes on",
                                          type(self).__name__, type(message).__name__, error)
        hook = self._tracker.on_message_error
        if hook is not None:
            hook(self.actor_ref, message, error)

    def _handle_failure(self, *exc_info: Any) -> None:
        self._failed = True
        super()._handle_failure(*exc_info)

    def _actor_loop(self) -> None:
        try:
            super()._actor_loop()
        finally:
            self._report_exit()


class Tellable(Protocol):
    """What :func:`tell` sends to: a Pykka actor ref, or an object that handles the message
    synchronously behind the same method (the timer table, ``actors/timers.py``)."""

    def tell(self, message: Any) -> None: ...


def tell(ref: Tellable | None, message: Any) -> bool:
    """Send ``message`` if ``ref`` is alive; False (not an error) when it is gone.

    A message dropped because its target is dead is logged: a warning when the target is
    a core actor (``survive_errors``: it should never be dead while the runtime runs), at
    debug level for a session incarnation (late messages to one that ended are normal).
    """
    if ref is None:
        return False
    try:
        ref.tell(message)
        return True
    except pykka.ActorDeadError:  # only an actor ref raises it
        actor_class: type = getattr(ref, "actor_class", type(ref))
        tracker = getattr(getattr(ref, "_actor", None), "_tracker", None)
        core = bool(getattr(actor_class, "survive_errors", False)) and not getattr(tracker, "stopping", False)
        logger.log("WARNING" if core else "DEBUG", "{} to the dead {} dropped",
                   type(message).__name__, actor_class.__name__)
        return False
