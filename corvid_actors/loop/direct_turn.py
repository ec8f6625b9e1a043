"""The direct loop's turn, and what its collaborators tell the loop to do next.

:class:`DirectTurn` is the state of one user turn, handed explicitly to the loop's
collaborators (:mod:`.direct_replies`, :mod:`.direct_tools`); they never see the loop
itself. Each collaborator step returns its effects and a verdict — a :class:`Next` or
one of :class:`Retry`, :class:`Outage`, :class:`Fatal` — which only the loop
(:mod:`.direct`) turns into its own next step (call the model, iterate, wait, finish).
Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from corvid_actors.loop.tool_walk import ToolWalk
from corvid_actors.loop.turn import TurnAccount


@dataclass
class DirectTurn(TurnAccount):
    """What one user turn accumulates (the shared accounting, plus the direct loop's own)."""

    iteration: int = 0
    tools_used: bool = False
    #: the outstanding (or next) model call's: ``turn`` or ``summary``
    purpose: str = "turn"
    overflow_retried: bool = False
    walk: ToolWalk = field(default_factory=ToolWalk)
    #: the user's next message interrupts this turn at its next safe point
    interrupted: bool = False


class Next(enum.Enum):
    """The loop's next step after a collaborator's effects."""

    ITERATE = "iterate"  # the next iteration (trim, call the model), or the cap's end
    CALL_AGAIN = "call_again"  # the same model call again (``turn.purpose``)
    SUMMARY = "summary"  # the summary epilogue (a stall)
    WALK = "walk"  # work through ``turn.walk``'s calls
    FINISH = "finish"  # the turn ends normally
    END_INTERRUPTED = "end_interrupted"  # the turn ends, interrupted (nothing streamed)
    WAIT_APPROVAL = "wait_approval"  # an ``AskApproval`` is out
    WAIT_TOOL = "wait_tool"  # a ``RunTool`` is out


@dataclass(frozen=True)
class Retry:
    """A retryable provider error: call again after ``delay_s`` (the loop schedules it)."""

    delay_s: float


@dataclass(frozen=True)
class Outage:
    """Too many provider errors in a row: release the slot and report ``message``."""

    message: str


@dataclass(frozen=True)
class Fatal:
    """An error the session cannot go on from: ``result`` error, ``error``, ``Exit(1)``."""

    message: str


#: what a collaborator step of the direct loop leads to
Verdict = Next | Retry | Outage | Fatal
