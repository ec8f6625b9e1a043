"""What both agent loops share about a turn: its phases, accounting, input queue and abort.

Pure: no I/O, no clock. The direct loop (:mod:`.direct`) and the SDK loop (:mod:`.sdk`)
keep their own rules (slots, trimming, compaction, retries); what a turn *is* — the
phase a loop waits in, what a turn adds up for its ``result`` event, how user messages
that arrive mid-turn wait their turn, and what ``abort()`` leaves behind — is written
once, here.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from corvid_actors.events import Result
from corvid_actors.loop.effects import (
    Effect,
    StopModelCall,
    TurnMetrics,
    UserMessage,
    WithdrawApproval,
)
from corvid_actors.providers.base import ModelResponse

#: ends a reply cut short by the user's next message (double texting ``interrupt``): in
#: the conversation the model sees and in the stored message alike
INTERRUPTED_MARKER = "[interrupted by the user's next message]"
#: why an approval the interrupted turn waited for was withdrawn (what its asker is shown)
APPROVAL_WITHDRAWN = "Withdrawn: the user's next message interrupted the turn."
#: what the model reads for a tool call of an interrupted turn that was not run
NOT_RUN_INTERRUPTED = "Not run: the turn was interrupted by the user's next message."

#: the usage counters a turn adds up, in the order the ``result`` event lists them
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")


class Phase(enum.Enum):
    """What a loop waits for. Inputs that do not answer it are ignored."""

    IDLE = "idle"  # between turns: a user message starts one
    WAIT_SLOT = "wait_slot"  # an AcquireSlot is outstanding
    WAIT_MODEL = "wait_model"  # a CallModel is outstanding
    WAIT_RETRY = "wait_retry"  # a retry timer (Schedule) is outstanding
    TOOLS = "tools"  # walking a response's tool calls (transient, within one handle)
    WAIT_APPROVAL = "wait_approval"  # an AskApproval is outstanding
    WAIT_TOOL = "wait_tool"  # a RunTool is outstanding
    DONE = "done"  # Exit was returned or abort() was called: silence from now on


@dataclass
class TurnAccount:
    """What one user turn adds up for its ``result`` event: cost, token usage, counters
    and the last assistant text."""

    metrics: TurnMetrics = field(default_factory=TurnMetrics)
    cost_usd: float = 0.0
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_FIELDS, 0))
    last_text: str = ""

    def add(self, response: ModelResponse) -> None:
        """Count one model response's cost and tokens (every call of the turn counts,
        summaries and compactions included)."""
        self.cost_usd += response.cost_usd
        for name in USAGE_FIELDS:
            self.usage[name] += getattr(response.usage, name)

    def result(self, subtype: str, *, num_turns: int, text: str | None = None) -> Result:
        """The turn's ``result`` event; ``text`` defaults to the last assistant text."""
        return Result(
            subtype=subtype,
            total_cost_usd=self.cost_usd,
            num_turns=num_turns,
            result=self.last_text if text is None else text,
            usage=dict(self.usage),
            metrics=self.metrics.as_dict(),
        )


class InputQueue:
    """User messages a loop holds while a turn runs, first come first served.

    The loop owns it: the session actor hands every user message to ``Loop.handle`` at
    once, and each message starts exactly one turn, in the order they arrived.
    """

    def __init__(self) -> None:
        self._waiting: deque[UserMessage] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def offer(self, message: UserMessage, *, idle: bool) -> UserMessage | None:
        """Take ``message``; when the loop is ``idle``, return the message to start a turn
        with now (the oldest waiting one, which may be an earlier message), else None."""
        self._waiting.append(message)
        return self._waiting.popleft() if idle else None

    def next(self) -> UserMessage | None:
        """The oldest waiting message (it starts the next turn), or None."""
        return self._waiting.popleft() if self._waiting else None

    def clear(self) -> None:
        """Drop the waiting messages: the loop was aborted and will answer none of them
        (both loops' ``abort()`` goes to :attr:`Phase.DONE`, clears this queue and returns
        no effects — the actor releases what it holds itself)."""
        self._waiting.clear()


def interrupted_reply(partial: str) -> str:
    """The assistant message kept for a turn the user's next message interrupted: what
    was streamed of the reply, then :data:`INTERRUPTED_MARKER` (the marker alone when
    nothing was)."""
    partial = partial.rstrip()
    return f"{partial}\n\n{INTERRUPTED_MARKER}" if partial else INTERRUPTED_MARKER


def interrupt_step(phase: Phase, *, waiting: int, call_purpose: str, interrupted: bool) -> str:
    """What a loop does on ``InterruptTurn`` (double texting ``interrupt``), in ``phase``
    with ``waiting`` queued messages, ``call_purpose`` the outstanding model call's
    ("turn", "summary", "compaction"; "" for none) and ``interrupted`` when the turn was
    interrupted already: ``ignore`` (between turns, ended, nothing waits, or said
    before), ``stop`` (a turn's model stream: ``StopModelCall`` now), ``end`` (a retry
    wait: the turn ends now), ``withdraw`` (an approval wait: ``WithdrawApproval`` now; its
    denial ends the turn), or ``later`` — a slot, a running tool, a summary or a compaction
    call is let finish, and the turn ends at the loop's next safe point."""
    if phase in (Phase.IDLE, Phase.DONE) or not waiting or interrupted:
        return "ignore"
    if phase is Phase.WAIT_MODEL and call_purpose == "turn":
        return "stop"
    if phase is Phase.WAIT_APPROVAL:
        return "withdraw"
    return "end" if phase is Phase.WAIT_RETRY else "later"


def interrupt_effects(step: str, end_turn: Callable[[str], list[Effect]]) -> list[Effect]:
    """The effects of an :func:`interrupt_step` verdict: ``stop`` the model call,
    ``withdraw`` the approval (its denial comes back and ends the turn), ``end`` the turn
    now through ``end_turn`` (nothing was streamed), or nothing — ``later``: the loop's
    next safe point ends it; ``ignore``."""
    if step == "stop":
        return [StopModelCall()]
    if step == "withdraw":
        return [WithdrawApproval()]
    return end_turn("") if step == "end" else []


def as_said(history: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Stored ``(role, content)`` messages, oldest first, in the order they were said: a
    reply the user's next message interrupted (ending with :data:`INTERRUPTED_MARKER`) is
    stored after that message — a message is stored when it is accepted, the cut reply
    when the turn ends — so it goes back before the user message stored just before it."""
    said = list(history)
    for i in range(1, len(said)):
        role, content = said[i]
        if role == "assistant" and content.endswith(INTERRUPTED_MARKER) and said[i - 1][0] == "user":
            said[i - 1], said[i] = said[i], said[i - 1]
    return said
