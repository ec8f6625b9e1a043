"""The contract between a loop (functional core) and the session actor (imperative shell).

A loop is a state machine: the actor feeds it :data:`LoopInput` values and performs the
:data:`Effect` values it returns, in order. A loop does no I/O, reads no clock and starts
no threads, so every rule in it is testable by feeding inputs and reading effects.

Lifecycle, as the actor drives it::

    effects = loop.start(prompt)          # first user turn
    ... perform effects, feed results back with loop.handle(...)
    TurnFinished  -> the actor idles until the next user message
    effects = loop.handle(UserMessage(text))
    Exit(code)    -> the actor ends the session with that exit code
    effects = loop.abort()                -> the actor applies the clean-up, then stops

At most one ``CallModel`` or ``RunTool`` is outstanding at a time; the loop waits for
its result input before asking for the next one. The loop owns its input queue: the
actor hands every user message to ``handle`` when it arrives, mid-turn or not (see
:class:`Loop`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from corvid_actors.core.vocabulary import ToolResult
from corvid_actors.events import Assistant, Event, Result
from corvid_actors.providers.base import (
    ChatMessage,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
)

# --- effects (loop -> actor) ----------------------------------------------------------


@dataclass(frozen=True)
class CallModel:
    """Run one model call on the worker; answer with ModelSucceeded or ModelFailed.

    ``purpose`` tells the actor what the call is for ("turn", "summary", "compaction");
    only ``"turn"`` calls stream their text to subscribers as ``content_block_delta``.
    """

    request: ModelRequest
    purpose: str = "turn"


@dataclass(frozen=True)
class RunTool:
    """Run a tool on the worker; answer with ToolFinished."""

    call: ToolCall


@dataclass(frozen=True)
class AskApproval:
    """Ask the ApprovalBroker; answer with ApprovalDecided.

    ``kind`` is "tool" for an ordinary tool approval, "doom_loop" for the repeated-call
    guard. ``description`` is what a human sees (never the raw input).
    """

    call: ToolCall
    description: str
    kind: str = "tool"


@dataclass(frozen=True)
class AcquireSlot:
    """Ask the SlotPool for an inference slot; answer with SlotGranted or SlotTimedOut."""

    model: str


@dataclass(frozen=True)
class ReleaseSlot:
    """Give the inference slot back (no answer)."""


@dataclass(frozen=True)
class Emit:
    """Publish ``event`` to the session's subscribers.

    A turn's last reply (``Assistant``) and its ``Result`` come in one list of effects:
    the actor stores the reply and the turn's close together (:func:`closing_replies`)."""

    event: Event


@dataclass(frozen=True)
class Schedule:
    """Feed TimerFired(token) back after ``delay_s`` seconds (through the runtime's Timers)."""

    delay_s: float
    token: str


@dataclass(frozen=True)
class ReportOutage:
    """Upstream outage: the supervisor pauses the session (no exit)."""

    message: str


@dataclass(frozen=True)
class TurnFinished:
    """The turn is over; the actor idles until the next user message."""


@dataclass(frozen=True)
class Exit:
    """The session ends with ``code`` (0 clean, 1 failure)."""

    code: int


@dataclass(frozen=True)
class StopModelCall:
    """Cancel the outstanding model call now (between two streamed chunks) and answer with
    :class:`ModelStopped`, carrying the text streamed so far. Asked after
    :class:`InterruptTurn`; never for a tool run, which is let finish."""


@dataclass(frozen=True)
class WithdrawApproval:
    """Withdraw the approval request the loop waits for (after :class:`InterruptTurn`):
    the broker denies it, and the answer comes back as ``ApprovalDecided``. Nothing ran."""


@dataclass(frozen=True)
class PersistMessage:
    """Store a message of the conversation (assistant replies and summaries)."""

    role: str
    content: str


Effect = (
    CallModel
    | RunTool
    | AskApproval
    | AcquireSlot
    | ReleaseSlot
    | Emit
    | Schedule
    | ReportOutage
    | TurnFinished
    | Exit
    | PersistMessage
    | StopModelCall
    | WithdrawApproval
)

# --- inputs (actor -> loop) -----------------------------------------------------------


@dataclass(frozen=True)
class UserMessage:
    """A user message: its text, and for multimodal content its blocks as given (text
    and image, see ``corvid_actors.content``; ``text`` is then their text parts)."""

    text: str
    blocks: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, prompt: str | UserMessage) -> UserMessage:
        """``prompt`` as a UserMessage (what ``Loop.start`` receives may be either)."""
        return prompt if isinstance(prompt, UserMessage) else cls(prompt)


@dataclass(frozen=True)
class InterruptTurn:
    """The user sent another message while a turn runs (handed to ``handle`` just before
    this) and the session's double-texting policy is ``interrupt``: end the turn at its
    next safe point — its partial reply kept and marked interrupted — so that the waiting
    message is answered next. A loop that does not know it ignores it (the message then
    waits its turn, as with ``enqueue``)."""


@dataclass(frozen=True)
class ModelStopped:
    """The model call was cancelled on :class:`StopModelCall`; ``text``: what it streamed."""

    text: str = ""


@dataclass(frozen=True)
class ModelSucceeded:
    response: ModelResponse
    #: size in bytes of the request as sent (for the payload-growth failsafe)
    request_bytes: int = 0


@dataclass(frozen=True)
class ModelFailed:
    error: ProviderError


@dataclass(frozen=True)
class ToolFinished:
    call_id: str
    result: ToolResult


@dataclass(frozen=True)
class ApprovalDecided:
    """A human's (or policy's) decision. ``scope == "session"`` means allow for the session."""

    call_id: str
    allowed: bool
    message: str = ""
    updated_input: dict[str, Any] | None = None
    scope: str = "once"


@dataclass(frozen=True)
class SlotGranted:
    pass


@dataclass(frozen=True)
class SlotTimedOut:
    pass


@dataclass(frozen=True)
class TimerFired:
    token: str


LoopInput = (
    UserMessage
    | ModelSucceeded
    | ModelFailed
    | ToolFinished
    | ApprovalDecided
    | SlotGranted
    | SlotTimedOut
    | TimerFired
    | InterruptTurn
    | ModelStopped
)


class Loop(Protocol):
    """What the session actor needs from a loop.

    **Input.** Every user message goes to ``handle`` when it arrives. One that arrives
    while a turn runs is queued *by the loop* (:class:`corvid_actors.loop.turn.InputQueue`);
    each message starts exactly one turn, in the order they arrived, and each turn ends
    with ``TurnFinished`` (the next queued turn's effects may follow it in the same list)
    unless the session ends first (``Exit``, ``ReportOutage``). The actor counts the
    messages it handed over against the ``TurnFinished`` it saw to know whether a turn
    runs (for the idle timeout and turn durations).

    **Interrupt.** With the double-texting policy ``interrupt`` the actor follows a
    mid-turn message with :class:`InterruptTurn`. The loop ends the turn at its next safe
    point — a model stream at once (``StopModelCall``, answered by ``ModelStopped``), an
    approval wait at once (``WithdrawApproval``), a running tool once it has finished —
    keeping the partial reply marked
    (``turn.interrupted_reply``), with a ``result`` of subtype ``interrupted`` and
    ``TurnFinished``; the waiting message's turn follows. A loop may ignore it (enqueue).

    **Abort.** ``abort()`` returns clean-up effects, and the actor applies them — but
    only those that publish and start nothing, because the session's lifeline may be
    closed already: ``ReleaseSlot`` and ``PersistMessage``. Any other effect returned
    by ``abort()`` is dropped (and logged). The loops in this package return no effects:
    the actor releases what it holds (slot, timers, worker, approvals) itself.
    """

    def start(self, prompt: str | UserMessage) -> list[Effect]:
        """Begin the first turn with ``prompt``: a string, or a :class:`UserMessage` when
        the first message is multimodal (a loop that takes only strings may treat that
        as ``prompt.text``)."""
        ...

    def handle(self, event: LoopInput) -> list[Effect]:
        """Advance on ``event``; return the effects to perform, in order."""
        ...

    def abort(self) -> list[Effect]:
        """The session is being stopped: return clean-up effects (``ReleaseSlot``,
        ``PersistMessage``), which the actor applies; it drops any other effect.

        Called once; the loop returns no effects from ``handle`` after it, and drops
        the user messages it still holds.
        """
        ...

    @property
    def history(self) -> list[ChatMessage]:
        """The conversation as the loop holds it (for diagnostics and compaction)."""
        ...


#: termination reasons of the stall detectors start with this
STALL_PREFIX = "stall_"
#: stall reasons that end the turn but do not count as a stall (``stall_detected`` false)
NOT_COUNTED_AS_STALL = frozenset({"stall_exploration"})


@dataclass
class TurnMetrics:
    """Counters a loop reports in its ``result`` event."""

    iterations: int = 0
    tool_calls: int = 0
    nudges: int = 0
    mid_chain_nudges: int = 0
    termination_reason: str = "normal"
    needs_summary: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stall_type(self) -> str | None:
        """The stall detector that ended the turn (a ``stall_*`` termination reason), or None."""
        reason = self.termination_reason
        return reason if reason.startswith(STALL_PREFIX) else None

    @property
    def stall_detected(self) -> bool:
        """True when a stall ended the turn — every ``stall_*`` reason but exploration drift,
        which is a focus problem rather than a stuck model (as the original's metrics)."""
        stall = self.stall_type
        return stall is not None and stall not in NOT_COUNTED_AS_STALL

    def as_dict(self) -> dict[str, Any]:
        return {
            "iterations": self.iterations,
            "tool_calls": self.tool_calls,
            "nudges": self.nudges,
            "mid_chain_nudges": self.mid_chain_nudges,
            "termination_reason": self.termination_reason,
            "needs_summary": self.needs_summary,
            "stall_detected": self.stall_detected,
            "stall_type": self.stall_type,
            **self.extra,
        }


#: the results that close their turn (a success; an interrupted turn, double texting)
CLOSING_RESULTS = frozenset({"success", "interrupted"})


def closing_replies(effects: list[Effect]) -> frozenset[int]:
    """The positions, in one list of effects, of the replies that close their turn and of
    the results they close: an ``Emit(Assistant)`` with text followed, with no other result
    between, by a closing ``Emit(Result)`` (the loops emit a turn's last reply and its result
    together). That reply's row closes the turn in its own statement (``closes_turn``), so a
    crash never leaves it stored with the turn open — the next owner would answer it again
    (issue 36) — and the result's usage write then closes nothing. A turn whose result comes
    without its reply (a tool turn's end, an error) is closed by the usage write, as before."""
    found: list[int] = []
    reply: int | None = None
    for index, effect in enumerate(effects):
        if type(effect) is not Emit:
            continue
        event = effect.event
        if isinstance(event, Assistant) and event.content:
            reply = index
        elif isinstance(event, Result):
            if reply is not None and event.subtype in CLOSING_RESULTS:
                found += (reply, index)
            reply = None
    return frozenset(found)
