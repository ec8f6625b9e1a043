"""What a session incarnation is built with, and the state it shares with the supervisor.

:class:`SessionWiring` is the bundle of references and settings the supervisor makes for
each incarnation of a :class:`~corvid_actors.actors.session.SessionActor`;
:class:`Lifeline` (its publish gate and kill switch) and :class:`TurnTally` (its turn
accounting) are shared objects: the actor, its worker threads and the supervisor hold
the same instance (the lifeline is thread-safe; the tally is written by the actor only).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pykka

from corvid_actors.actors.base import tell
from corvid_actors.actors.delta_pump import DeltaPump
from corvid_actors.actors.events import DeltaBuffer, Publish, PublishDeltas, PublishMany
from corvid_actors.actors.timers import Timers
from corvid_actors.clock import Clock
from corvid_actors.core.double_texting import ENQUEUE
from corvid_actors.core.io_loop import IoLoop
from corvid_actors.core.vocabulary import CancelToken
from corvid_actors.events import ContentBlockDelta, Event
from corvid_actors.loop import effects as fx
from corvid_actors.policy.access import SessionBudget
from corvid_actors.providers.base import Provider
from corvid_actors.schema.sections import AccessConfig, RetrySchedule
from corvid_actors.telemetry.tracing import NO_TRACING, Tracing
from corvid_actors.tools.base import ToolContext, ToolRegistry


class Lifeline:
    """An incarnation's publish gate and kill switch, shared by its actor, its worker and
    the supervisor. ``close()`` is synchronous: once it returns, nothing more is published
    and the in-flight worker call is cancelled.

    Streamed text is coalesced while the EventBus is behind: a ``content_block_delta`` is
    told to the bus in a :class:`~corvid_actors.actors.events.DeltaBuffer`, and the deltas
    that follow are appended to that buffer for as long as the bus has not taken it; any
    other event seals the buffer first (order kept). An idle bus takes each buffer before
    the next delta comes, so it delivers every delta as it came. ``coalesce=False``
    (``[supervisor] coalesce_deltas``) delivers every delta on its own. On the I/O loop's
    thread, with a ``pump`` (:mod:`~corvid_actors.actors.delta_pump`), a new buffer is
    offered to the pump instead of told to the bus: the bus is told at most once per
    ``[supervisor] delta_interval_ms`` for every stream of the loop; any other event (and
    :meth:`close`) tells an untold buffer first, so order is kept. ``publish`` may be
    called from any thread (the actor's, a worker's, the I/O loop's); streamed text takes
    :meth:`publish_text`, which costs one lock and no event object per chunk.
    """

    def __init__(self, session_id: str, bus: pykka.ActorRef[Any], *, coalesce: bool = True,
                 gate: Callable[[], bool] | None = None, pump: DeltaPump | None = None) -> None:
        self.session_id = session_id
        self._bus = bus
        self._coalesce = coalesce
        self._pump = pump if coalesce else None
        #: several daemons (issue 20): publish only while this daemon's lease is surely its own
        self._gate = gate
        self._lock = threading.Lock()
        self._closed = False
        self._accepting_input = True
        #: the delta buffer told to the bus and not yet taken by it (None: sealed)
        self._open: DeltaBuffer | None = None
        #: events published while the actor holds them (see :meth:`hold`), else None
        self._held: list[Event] | None = None
        self.cancel = CancelToken()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def accepting_input(self) -> bool:
        """False once the incarnation has ended (or been closed): a user message sent now
        would never be answered, so the supervisor refuses it instead of persisting it."""
        return self._accepting_input and not self._closed

    def refuse_input(self) -> None:
        """The incarnation takes no more user messages (it is ending)."""
        self._accepting_input = False

    def publish(self, event: Event) -> bool:
        """Hand ``event`` to the bus; False once the lifeline is closed (dropped)."""
        if self._coalesce and type(event) is ContentBlockDelta:
            return self.publish_text(event.text)
        with self._lock:
            if self._closed or (self._gate is not None and not self._gate()):
                return False
            if self._held is not None:
                self._held.append(event)
                return True
            self._seal()
            tell(self._bus, Publish(self.session_id, event))
            return True

    def _seal(self) -> None:
        """Close the open buffer (the next delta starts another); a buffer still waiting in
        the pump is told now, ahead of what the caller tells next. Under ``_lock``."""
        buffer = self._open
        if buffer is not None:
            self._open = None
            if not buffer.told:
                buffer.told = True
                tell(self._bus, PublishDeltas(self.session_id, buffer))

    def publish_text(self, text: str) -> bool:
        """Publish streamed text (a ``content_block_delta``): what :meth:`publish` does
        with ``ContentBlockDelta(text=text)``, without making the event — the bus makes
        one per buffer it takes. Called once per streamed chunk, so it takes one lock (the
        open buffer shares it) and builds nothing while the bus is behind."""
        if not self._coalesce:
            return self.publish(ContentBlockDelta(text=text))
        with self._lock:
            if self._closed or (self._gate is not None and not self._gate()):
                return False
            if self._held is not None:  # in order with the events the actor holds
                self._held.append(ContentBlockDelta(text=text))
                return True
            buffer = self._open
            if buffer is not None and not buffer.taken:
                buffer.parts.append(text)
                return True
            pump = self._pump
            if pump is None or not pump.here():
                self._open = DeltaBuffer(text, self._lock)
                tell(self._bus, PublishDeltas(self.session_id, self._open))
                return True
            self._open = buffer = DeltaBuffer(text, self._lock, told=False)
        pump.offer(self.session_id, buffer)  # the pump's state is the loop thread's alone
        return True

    def hold(self) -> None:
        """From now on, what is published (from any path: an event, a write's error) is
        gathered, in order, until :meth:`flush`: the session actor holds a handler's run
        of events and tells them to the bus as one message. It flushes before it tells
        another actor anything, so no event of another actor's that follows from that
        message can overtake the held ones."""
        with self._lock:
            if self._held is None:
                self._held = []

    def flush(self, *, keep_holding: bool = False) -> None:
        """Tell the bus what is held (one :class:`PublishMany`, or a :class:`Publish` for
        one event); dropped if the lifeline was closed meanwhile (as a publish after the
        close would be). ``keep_holding``: go on gathering afterwards."""
        with self._lock:
            held = self._held
            if held is None:
                return
            self._held = [] if keep_holding else None
            if not held or self._closed or (self._gate is not None and not self._gate()):
                return
            self._seal()
            tell(self._bus, Publish(self.session_id, held[0]) if len(held) == 1
                 else PublishMany(self.session_id, tuple(held)))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._accepting_input = False
            # text published before the close still goes out, ahead of what the closer
            # publishes next (a told buffer always did: it was in the bus's inbox)
            self._seal()
            self._held = None
        self.cancel.cancel()


@dataclass
class TurnTally:
    """An incarnation's turn accounting, written by its actor only; the supervisor reads it
    when the incarnation ends (exit notes, ``session_info``). Starts with the counts the
    session had (a new incarnation goes on counting)."""

    turns: int = 0
    cost_usd: float = 0.0
    #: a turn of this incarnation succeeded (the supervisor resets the outage backoff)
    answered: bool = False
    #: a turn is in flight now (a drain waits for it to end before handing the session over)
    in_turn: bool = False
    #: the incarnation asked the SlotPool for a slot or the ApprovalBroker for an approval
    #: (set before the request is told): only then can either hold anything of it, so only
    #: then does the supervisor release both when the incarnation ends
    asked_slots_or_approvals: bool = False


@dataclass
class SessionWiring:
    """The references and settings an incarnation is built with (made by the supervisor)."""

    session_id: str
    generation: int
    lifeline: Lifeline
    supervisor: pykka.ActorRef[Any]
    timers: Timers
    clock: Clock
    store: Any
    provider: Provider
    loop: fx.Loop
    tools: ToolRegistry
    tool_context: ToolContext
    timeout_s: float
    #: waiting this long for a user message ends the session cleanly (exit 0); None: no
    #: idle exit, the session waits until the inactivity timeout stops it
    idle_timeout_s: float | None
    slot_pool: pykka.ActorRef[Any] | None = None
    approvals: pykka.ActorRef[Any] | None = None
    approval_timeout_s: float = 55.0
    slot_weight: int = 1
    #: where payload-growth snapshots are written (None: not written, only logged)
    snapshot_dir: Path | None = None
    #: turn accounting (shared with the supervisor, who reads it at the end)
    tally: TurnTally = field(default_factory=TurnTally)
    #: the session's source (the CreditBank charges ``chat`` turns) and the bank, if any
    source: str = ""
    credits: pykka.ActorRef[Any] | None = None
    #: how writes the store refused are retried (``[store.write_retry]``)
    write_retry: RetrySchedule = field(default_factory=RetrySchedule)
    #: the runtime's I/O loop: a provider with ``astream`` streams there (None: workers)
    io_loop: IoLoop[Any] | None = None
    #: several daemons (issue 20): told ``(session_id, deadline, idle_deadline)`` when the
    #: incarnation starts waiting for its user (the wall-clock inactivity deadline, and the
    #: idle exit's when one is armed), starts a turn (None, None) or is extended — the
    #: ClusterSeat's ``note_deadline``; None with one daemon
    deadline_sink: Callable[[str, datetime | None, datetime | None], None] | None = None
    #: a waiting session taken over from another daemon: the inactivity deadline that
    #: daemon stored, kept until the session's next event (None: a full timeout)
    inherited_deadline: datetime | None = None
    #: what a user message that arrives mid-turn does: ``enqueue``, ``interrupt`` or
    #: ``reject`` (:mod:`corvid_actors.core.double_texting`, resolved at the start)
    double_texting: str = ENQUEUE
    #: ... and its idle exit's deadline (issue 36; None: a full ``idle_timeout_s``)
    inherited_idle_deadline: datetime | None = None
    #: the spending caps checked before each turn (resolved at the start; None: no cap),
    #: and the ``[access]`` config a re-read agent's settings fall back to
    budget: SessionBudget | None = None
    access: AccessConfig = field(default_factory=AccessConfig)
    #: OpenTelemetry spans of its turns, model and tool calls (the runtime's tracer)
    tracing: Tracing = NO_TRACING
    #: the agent's name and the provider's (span attributes)
    agent: str = ""
    provider_name: str = ""
    #: the incarnation's journal tap (``corvid_actors.actors.journal.SessionTap``); None:
    #: not journaled
    journal: Any = None
    #: waiting this long for a user message (no turn, worker, slot, approval or loop timer
    #: in flight) offers the incarnation for passivation (issue 37); None: never
    passivate_after_s: float | None = None
