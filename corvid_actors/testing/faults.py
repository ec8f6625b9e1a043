"""Fault hooks: make a running runtime misbehave on purpose, through its public seams.

- :func:`refuse_input`: the session's running incarnation refuses user messages from
  now on, as one does in the moment between its end and the supervisor hearing of it.
  ``send_message`` then returns False, persists nothing and evicts the incarnation;
  ``resume_process(session_id, prompt)`` publishes ``system`` ``warm_path_failed`` and
  cold-starts.
- :func:`kill_incarnation`: the session's running incarnation's actor fails, as on a bug
  in it: the supervisor sees a crash (``session_error`` crash, ``session_exited`` code 1,
  the exit note) and restarts it with backoff (``session_restarting``) when its source
  auto-restarts.
- :func:`kill_runtime`: the whole runtime dies as its process would on ``kill -9``:
  nothing is written or published on the way down, so the store holds what a crashed
  daemon leaves (``running`` rows, open turns, no exit notes) for a second runtime over
  the same store to recover.
- :class:`StoreFault`: a store refuses the Nth operation of a chosen kind (a write such
  as ``append_message``, ``update_session`` or the ledger's ``deduct``), as it does when
  its server is down — for fault-injection tests and hooks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from corvid_actors.actors.supervisor import KillIncarnation, RefuseInput
from corvid_actors.errors import StoreUnavailableError

if TYPE_CHECKING:
    from corvid_actors.db.store import Store
    from corvid_actors.runtime import Runtime

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["StoreFault", "kill_incarnation", "kill_runtime", "refuse_input"]

#: what a killed runtime's calls say (``RuntimeStoppedError``) and ``runtime.failure``
KILLED = "killed (corvid_actors.testing.faults.kill_runtime: as by kill -9, nothing written on the way down)"


def refuse_input(runtime: Runtime, session_id: str) -> bool:
    """Make ``session_id``'s running incarnation refuse input; False if it is not running.

    Call it from a test thread (not an actor thread or an event callback), like any
    :class:`~corvid_actors.runtime.Runtime` method.
    """
    return bool(runtime._ask(RefuseInput(session_id)))


def kill_incarnation(runtime: Runtime, session_id: str) -> bool:
    """Make ``session_id``'s running incarnation crash; False if it is not running.

    Its actor fails on a message as it would on a bug (``on_failure`` runs, in-flight
    work is cancelled, the actor stops): the supervisor handles it as any crash — exit
    code 1, ``session_error`` / ``session_exited`` / the crash note, then a restart after
    the backoff delay (``supervisor.restart_backoff_*``) for an auto-restarting source.
    The crash happens on the actor's thread right after this returns: ``runtime.settle()``
    waits for it. Call it from a test thread, like any Runtime method.
    """
    return bool(runtime._ask(KillIncarnation(session_id)))


def kill_runtime(runtime: Runtime) -> None:
    """End ``runtime`` the way ``kill -9`` ends a daemon: at once, with no graceful write.

    No session is stopped or marked for resume, no exit note, ``session_stopped`` or
    other event is written or published, no cluster lease is released: the store keeps
    exactly what was committed before the kill — a running session's row stays
    ``running`` with its pid (and ``open_turns`` when a turn was in flight), its
    unanswered user message stays the last one. Every actor of the runtime stops, its
    model calls are cancelled (a scripted turn taken by a call in flight is spent), the
    timer table and I/O loop close, a :class:`~corvid_actors.testing.SimClock` forgets it
    (its timers never fire; the clock stays open for the next runtime) and a store the
    runtime opened itself is closed. Later calls raise ``RuntimeStoppedError`` and
    ``runtime.failure`` says it was killed; ``shutdown()`` does nothing.

    Then build a second runtime over the same store — the same ``store_url`` (a SQLite
    file: an in-memory database dies with its connection) or the same ``store=`` object
    — and check the recovery: its start-up resets the rows left ``running`` to ``idle``
    (pid NULL, as the process-manager seed says of stale sessions) and marks them for
    resume (``stale_session_ids``); ``resume_pending_sessions()`` resumes them, calling
    the model again for a session killed mid-turn::

        kill_runtime(first)
        second = sim_runtime(clock, scripted, store_url=url)
        assert second.stale_session_ids == [session.id]
        second.resume_pending_sessions()

    The incarnations handle nothing more from the moment of the call; a message already
    queued for the supervisor is handled before it stops: settle first
    (``runtime.settle()``) for a kill at a known point. Call it from a test thread.
    """
    runtime._die(KILLED)


# --- store faults -------------------------------------------------------------------------

#: kinds that name a family of store operations rather than one method
_KIND_ALIASES = {
    # an append goes through the group commit, a plain insert, or (content blocks) its own
    # (or, a user's turn sent to a running session, the send lane)
    "append_message": frozenset({"append_message", "_commit_message_groups", "insert_messages", "_append_blocks",
                                 "append_user_turn"}),
}


class StoreFault:
    """Make a :class:`~corvid_actors.db.store.Store` (or a Runtime's store: pass the
    Runtime) refuse operations of one kind on purpose.

    ``kind`` is the name of a store operation — a :class:`Store` method (``update_session``,
    ``add_session_usage``, ``open_turn``, ``create_session`` …), a ledger one (``deduct``,
    ``credit``, ``open_account``) or ``append_message`` (every way a message is appended).
    The ``nth`` operation of that kind from now on raises ``error`` (default: a
    ``StoreUnavailableError``, "store unavailable: injected fault …"), and so do the
    ``times - 1`` after it (``times=None``: every one until :meth:`clear`). The operation
    is refused *before* it runs: nothing of it is written, as when the server is down.

        fault = StoreFault(runtime, "deduct", nth=1)
        ...
        assert fault.raised == 1
        fault.clear()

    Also a context manager (cleared on exit). It wraps the store's ``run`` (the seam every
    store operation passes through), so it works under a running runtime, from any thread.
    """

    def __init__(self, store: Store | Runtime, kind: str, *, nth: int = 1, times: int | None = 1,
                 error: BaseException | None = None) -> None:
        if nth < 1 or (times is not None and times < 1):
            raise ValueError("nth and times must be at least 1")
        # a Runtime: its store (the one its actors write through)
        store = store.internals.store if hasattr(store, "internals") else store
        self.store = store
        self.kind = kind
        self.nth = nth
        self.times = times
        self.error = error
        #: operations of the kind seen, and how many of them were refused
        self.seen = 0
        self.raised = 0
        self._names = _KIND_ALIASES.get(kind, frozenset({kind}))
        self._lock = threading.Lock()
        self._inner = store.run
        self._previous = store.__dict__.get("run")  # another fault's wrapper, or None
        self._active = True
        store.run = self._run  # type: ignore[method-assign]  # the fault wraps the store's seam in place

    def _run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        if self._active and getattr(fn, "__name__", "") in self._names and not self.store.in_transaction():
            with self._lock:
                self.seen += 1
                due = self.seen >= self.nth and (self.times is None or self.seen < self.nth + self.times)
                if due:
                    self.raised += 1
            if due:
                raise self._error()
        result: R = self._inner(fn, *args, **kwargs)  # the store's run gives fn's result
        return result

    def _error(self) -> BaseException:
        if self.error is not None:
            return self.error
        return StoreUnavailableError(f"store unavailable: injected fault ({self.kind} #{self.seen})")

    def clear(self) -> None:
        """Stop refusing: later operations run normally."""
        self._active = False
        if self.store.__dict__.get("run") == self._run:  # on top: unwrap (a fault below stays)
            if self._previous is None:
                del self.store.run
            else:
                self.store.run = self._previous  # type: ignore[method-assign]

    def __enter__(self) -> StoreFault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()
