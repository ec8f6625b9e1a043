"""The Runtime's lifecycle and root policy: settle, stop, shut down, fail as a whole.

:class:`RuntimeLifecycle` is the part of :class:`~corvid_actors.runtime.Runtime` that starts
the actor tree and ends it, and every facade call's gate (:meth:`RuntimeLifecycle.ask`:
RuntimeStoppedError once it is stopped). The Runtime holds one and forwards its public
methods to it, same names and signatures; it owns the state it changes (stopped, the
failure, the core actors watched, the fatal listeners).

Root policy (issue 16): the core actors (supervisor, slot pool, approval broker, credit
bank, event bus, store watch — and whatever a host adds with :meth:`RuntimeLifecycle.watch`,
e.g. the daemon's admin actor) survive a bad message each (``actors/base.py``); the timer
table is no actor and cannot die (``actors/timers.py``). If one
dies anyway — a bug, or someone stopped its ref — the runtime does not go on half alive:
it logs the failure, shuts down cleanly (sessions stopped and marked for resume, the same
rows the next start-up resumes: the state is rebuilt from the store by a restart), and
tells its fatal listeners (:meth:`RuntimeLifecycle.add_fatal_listener`), so the daemon
exits non-zero for its process supervisor to restart it. Every later call raises
``RuntimeStoppedError`` naming the failure.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors import approvals as ap
from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.base import ActivityAware, ActivityTracker, tell
from corvid_actors.actors.events import Publish
from corvid_actors.clock import Clock
from corvid_actors.db.ownership import DRAIN, SHUTDOWN
from corvid_actors.errors import RuntimeStoppedError, StoreError
from corvid_actors.events import ErrorEvent, SessionError
from corvid_actors.runtime.tree import RuntimeInternals

__all__ = ["RESUME_BATCH", "RuntimeLifecycle", "freeze_startup_heap"]

#: sessions per ``ResumeMany`` request of :meth:`RuntimeLifecycle.resume_all` (a batch's
#: reads are one statement each; its starts build concurrently before the next batch)
RESUME_BATCH = 500


class RuntimeLifecycle:
    """Start, settle, stop and shut down a Runtime; its root policy (see the module docstring).

    Made by the Runtime from its ``clock``, its ``tracker``, whether it opened its store
    itself (``owns_store``: shutdown closes it) and ``start``, which starts the actor tree
    (:func:`~corvid_actors.runtime.tree.start_actor_tree`). The constructor attaches a
    simulated clock to the tracker, starts the clock, sets the tracker's failure hooks
    (an actor may end as soon as it starts), calls ``start`` and watches the core actors
    it returns (:attr:`internals`).
    """

    def __init__(self, clock: Clock, tracker: ActivityTracker, *, owns_store: bool,
                 start: Callable[[], RuntimeInternals]) -> None:
        self._clock = clock
        self._tracker = tracker
        self._owns_store = owns_store
        self._stopped = False
        self._failure: str | None = None
        self._fatal_listeners: list[Callable[[str], None]] = []
        self._core: dict[str, str] = {}
        self._fail_lock = threading.Lock()
        if isinstance(clock, ActivityAware):  # the simulated clock settles us after each timer
            clock.attach(tracker, self.settle)
        clock.start()
        tracker.on_actor_exit = self._actor_exited
        tracker.on_message_error = self._message_failed
        self._internals = start()
        for name, ref in self._internals.core_actors():
            self.watch(ref, name)

    @property
    def internals(self) -> RuntimeInternals:
        """The actor tree ``start`` returned."""
        return self._internals

    @property
    def stopped(self) -> bool:
        """Shut down (or killed): every gated call raises RuntimeStoppedError."""
        return self._stopped

    @property
    def failure(self) -> str | None:
        """Why the runtime failed (a core actor died), or None; see the module docstring."""
        return self._failure

    def mark_stopping(self) -> None:
        """From now on an actor that ends is no failure (the host is shutting down)."""
        self._tracker.stopping = True

    # --- lifecycle -----------------------------------------------------------------------------

    def resume_pending_sessions(self) -> list[str]:
        """Resume every session marked for resume (stale at start-up or stopped by shutdown),
        in batches (``resume_all``: one that cannot start is logged, the others go on)."""
        ids = self.take_restart_pending()
        self.resume_all(ids)
        return ids

    def take_restart_pending(self) -> list[str]:
        """The sessions marked for resume, unmarked: the caller resumes them (one by one,
        as :meth:`resume_pending_sessions` does). With several daemons, those a run without
        leases left to resume (marked, or left running), claimed here — each by one daemon
        only; the sessions a cluster daemon's shutdown stopped are handed over by their
        released leases instead (the cluster sweep)."""
        seat = self._internals.cluster
        if seat is not None:
            return seat.claim_unleased_resumes()
        return list(self._internals.store.take_restart_pending())

    def resume_all(self, session_ids: Sequence[str]) -> None:
        """Resume ``session_ids`` (no new message: each comes back ready, or answers what
        was left unanswered) and return once each is started or refused — a daemon's
        start-up (issue 37, item 5). Batches of ``RESUME_BATCH`` go to the supervisor as one
        request each (:class:`~corvid_actors.actors.supervisor.ResumeMany`: the rows and
        last speakers of a batch are read in one statement each). The cyclic garbage
        collector is off meanwhile: its full collections walk the growing heap of resumed
        sessions again and again, a cost per session that grew with N (17 % of a 5,000
        session start-up). A session that cannot start is logged and skipped."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            for i in range(0, len(session_ids), RESUME_BATCH):
                replies = self.ask(sv.ResumeMany(tuple(session_ids[i:i + RESUME_BATCH])))
                for reply in replies.values():  # every start of the batch built (or refused)
                    sv.started_pid(reply)
        finally:
            if enabled:
                gc.enable()

    def work_tracker(self) -> ActivityTracker:
        """The count :meth:`settle` waits on: ``begin()`` / ``end()`` around a host's work
        outside the actors (a chat outbox's deliveries) makes settle() wait for it too."""
        return self._tracker

    def settle(self, timeout_s: float | None = 30.0) -> None:
        """Return when no actor has a message in flight and no worker is running.

        Exact, not a sleep. ``timeout_s`` (real seconds) is a safety net that raises
        SettleTimeout. Never call this from an actor thread or an event callback.
        """
        self._tracker.wait_idle(timeout_s)

    def stop_sessions(self, reason: str = "server_shutdown", *, settle_timeout_s: float = 10.0) -> None:
        """The supervisor half of :meth:`shutdown`: every session stopped and marked for
        resume exactly as shutdown does (``session_stopped`` with ``reason``, pending
        approvals denied, the runtime settled), while the store, the event bus and every
        read keep working — so a test can assert what shutdown leaves behind.

        From now on the runtime starts no session (``start_process`` / ``resume_process``
        raise RuntimeStoppedError; ``send_message`` returns False). Call :meth:`shutdown`
        afterwards, as always. Unlike shutdown, a step that fails raises.
        """
        if self._stopped:
            raise RuntimeStoppedError(self.stopped_message())
        for _, step in self._session_stop_steps(reason, settle_timeout_s):
            try:
                step()
            except pykka.ActorDeadError:
                raise RuntimeStoppedError(self.stopped_message()) from None

    def _session_stop_steps(self, reason: str, settle_timeout_s: float) -> tuple[tuple[str, Callable[[], Any]], ...]:
        """What stopping the sessions takes (shutdown's first half, and stop_sessions)."""
        steps: tuple[tuple[str, Callable[[], Any]], ...] = (
            ("stopping the sessions", lambda: self._internals.supervisor.ask(sv.Shutdown(reason))),
            ("denying pending approvals", lambda: self._internals.approvals.ask(ap.DenyAll("Server shutting down"))),
            ("settling", lambda: self._tracker.wait_idle(settle_timeout_s)))
        seat = self._internals.cluster
        if seat is not None:
            # several daemons: the stopped sessions' leases are handed over (others resume
            # them at their next sweep) and this daemon leaves the cluster
            why = DRAIN if reason == "drain" else SHUTDOWN  # for the ownership history
            steps += (("handing the sessions' leases over", lambda: seat.release_all(why)),
                      ("leaving the cluster", seat.leave))
        return steps

    def shutdown(self, reason: str = "server_shutdown", *, settle_timeout_s: float = 10.0) -> None:
        """Stop every session (marked for resume), deny pending approvals, stop all actors."""
        with self._fail_lock:  # the root policy may shut down from its own thread meanwhile
            if self._stopped:
                return
            self._stopped = True
        self._tracker.stopping = True
        for what, step in self._session_stop_steps(reason, settle_timeout_s):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - shutdown goes on regardless, but says so
                logger.opt(exception=not isinstance(exc, pykka.ActorDeadError)).warning(
                    "shutdown: {} failed ({}: {}); going on", what, type(exc).__name__, exc)
        for ref in self._internals.stop_order():
            try:
                ref.stop(block=True)
            except pykka.ActorDeadError:
                logger.debug("shutdown: {} was already stopped", ref.actor_class.__name__)
        self._internals.timers.close()  # every timer cancelled, once no actor can schedule one
        self._internals.io_loop.stop()  # cancels any stream still open, closes the HTTP clients
        if self.failure is not None:
            # The supervisor may be the one that died: sessions it could not stop are marked
            # for resume here, exactly as the next start-up would.
            try:
                marked = self._internals.store.reset_stale_sessions()
                if marked:
                    logger.warning("shutdown after a failure: {} session(s) marked for resume", len(marked))
            except Exception as exc:  # noqa: BLE001 - the next start-up resets them anyway
                logger.warning("shutdown: could not mark sessions for resume ({}); the next start-up will", exc)
        self._clock.stop()
        if self._internals.journal is not None:
            self._internals.journal.close()  # commits what it queued, before the store closes
        if self._owns_store:
            self._internals.store.close()

    def die(self, failure: str) -> None:
        """End this runtime as ``kill -9`` ends its process: for
        :func:`corvid_actors.testing.faults.kill_runtime` (see there), never for a host.

        Nothing is written or published on the way down: no session is stopped or marked
        for resume, no exit note or ``session_stopped`` is written, no lease released.
        Every incarnation's lifeline is closed first (its actor handles nothing more and
        its model call or stream is cancelled), then every actor of this runtime stops;
        the timer table and the I/O loop close, a simulated clock forgets this runtime
        (other runtimes on it go on), and a store the runtime opened itself is closed
        (its connection, as the process's would be). Later calls raise
        ``RuntimeStoppedError`` naming ``failure``."""
        with self._fail_lock:
            if self._stopped:
                return
            self._stopped = True
            self._failure = failure
        tracker, internals = self._tracker, self._internals
        tracker.stopping = True
        core = list(internals.stop_order())
        core_urns = {ref.actor_urn for ref in core}
        # the incarnations: every other actor started on this runtime's tracker
        incarnations = [ref for ref in pykka.ActorRegistry.get_all()
                        if getattr(getattr(ref, "_actor", None), "_tracker", None) is tracker
                        and ref.actor_urn not in core_urns]
        for ref in incarnations:
            lifeline = getattr(getattr(getattr(ref, "_actor", None), "w", None), "lifeline", None)
            if lifeline is not None:
                lifeline.close()
        first = [ref for ref in (internals.cluster_member, internals.supervisor) if ref is not None]
        last = [ref for ref in core if ref.actor_urn not in {f.actor_urn for f in first}]
        for ref in (*first, *incarnations, *last):  # nothing hears of an incarnation's end
            try:
                ref.stop(block=True)
            except pykka.ActorDeadError:
                pass
        internals.timers.close()
        internals.io_loop.stop()
        detach = getattr(self._clock, "detach", None)
        if callable(detach):
            detach(tracker)
        else:
            self._clock.stop()
        if internals.journal is not None:
            internals.journal.close()  # its writer thread ends (what it queued is committed, as a crash may)
        if self._owns_store:
            internals.store.close()

    # --- root policy --------------------------------------------------------------------------

    def watch(self, ref: pykka.ActorRef[Any], name: str) -> None:
        """Put ``ref`` (an actor started on this runtime's tracker) under the root policy:
        if it ends while the runtime runs, the runtime fails (see the module docstring)."""
        self._core[ref.actor_urn] = name
        if not ref.is_alive():
            self._actor_exited(ref, True)

    def add_fatal_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(failure)`` once, on a runtime thread, after a failure shut the runtime
        down (the daemon exits non-zero there)."""
        self._fatal_listeners.append(listener)

    def _actor_exited(self, ref: pykka.ActorRef[Any], failed: bool) -> None:
        # On the ending actor's own thread; most calls are session incarnations: cheap exit.
        name = self._core.get(ref.actor_urn)
        if name is None or self._stopped or self._tracker.stopping:
            return
        with self._fail_lock:
            if self.failure is not None:
                return
            self._failure = f"the {name} actor {'failed' if failed else 'was stopped'}"
        logger.critical("core actor failure: {}; shutting the runtime down (sessions marked for resume)",
                        self.failure)
        # Not on this thread: shutting down stops (and joins) actors, this one among them.
        threading.Thread(target=self._fail, name="corvid-root-policy", daemon=True).start()

    def _message_failed(self, ref: pykka.ActorRef[Any], message: Any, error: Exception) -> None:
        # A core actor skipped a told message that raised: the session it names hears why.
        sid = getattr(message, "session_id", None)
        if not isinstance(sid, str) or not sid:
            return
        kind = "store_unavailable" if isinstance(error, StoreError) else "internal_error"
        text = f"{ref.actor_class.__name__} could not handle {type(message).__name__}: {error}"
        tell(self._internals.bus, Publish(sid, ErrorEvent(error_type=kind, message=text)))
        tell(self._internals.bus, Publish(sid, SessionError(error_type=kind, severity="error", recoverable=True,
                                                 message=text)))

    def _fail(self) -> None:
        failure = self.failure or "a core actor ended"
        try:
            self.shutdown("core_actor_failed")
        except Exception:  # noqa: BLE001 - the listeners must hear of the failure whatever happened
            logger.exception("shutdown after a core actor failure failed")
        for listener in list(self._fatal_listeners):
            try:
                listener(failure)
            except Exception:  # noqa: BLE001 - one listener must not keep the others from hearing
                logger.opt(exception=True).error("fatal listener {} raised", listener)

    def ask(self, message: Any, ref: pykka.ActorRef[Any] | None = None) -> Any:
        """Ask ``ref`` (default: the supervisor) ``message`` and return its answer: every
        facade call's gate (RuntimeStoppedError once the runtime is stopped, or when the
        actor is dead)."""
        if self._stopped:
            raise RuntimeStoppedError(self.stopped_message())
        try:
            return (ref or self._internals.supervisor).ask(message)
        except pykka.ActorDeadError:
            raise RuntimeStoppedError(self.stopped_message()) from None

    def stopped_message(self) -> str:
        """What RuntimeStoppedError says: shut down, and the failure if there was one."""
        if self.failure is not None:
            return f"the runtime is shut down: {self.failure} (see the log; restart to resume)"
        return "the runtime is shut down"


def freeze_startup_heap() -> int:
    """Move everything the start-up made (modules, config, the actor tree, every resumed
    session) out of the cyclic garbage collector's reach; returns how many objects.

    Why: a full (generation 2) collection walks every tracked object, and a daemon with
    10,000 live sessions holds millions of them that live until shutdown. Two full
    collections cost 17 s of a 90 s streaming phase at 10,000 sessions (bench/scale: every
    thread stops while one runs). Frozen objects are still freed by reference counting;
    only cycles among them wait for the process to end. One collection first, so that the
    start-up's own cyclic garbage is freed rather than frozen. ``gc.set_threshold`` is left
    at its defaults: no measurement here showed a better setting.

    Called by the daemon once it has started, and by ``sim_runtime`` the first time it
    runs in a process (the imported modules: a simulation's full collections walk what
    the simulations made, not the ~190,000 objects of the imports).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
