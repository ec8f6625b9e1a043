"""The SDK loop's turn, and what its collaborators tell the loop to do next.

:class:`SdkTurn` is the state of one user turn, handed explicitly to the loop's
collaborators (:mod:`.sdk_compaction`, :mod:`.sdk_tools`); they never see the loop itself.
Each collaborator step returns its effects and a verdict — a :class:`Next`, a
:class:`Proceed` or a :class:`StopSession` — which only the loop (:mod:`.sdk`) turns into
its own next step. Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from corvid_actors.loop.effects import TurnMetrics
from corvid_actors.loop.tool_walk import ToolWalk
from corvid_actors.loop.turn import TurnAccount


@dataclass
class SdkTurn(TurnAccount):
    """Per-turn accounting (shared) and the SDK loop's own: compaction bookkeeping, the
    current response's tool calls and the approval they wait for."""

    metrics: TurnMetrics = field(
        default_factory=lambda: TurnMetrics(extra={"compactions": 0, "retries": 0})
    )
    #: the user message that started the turn (kept verbatim through compaction)
    prompt: str = ""
    last_context_tokens: int = 0
    #: a compaction ran; the next response tells whether it shrank the context
    awaiting_shrink_check: bool = False
    #: a compaction did not shrink the context: no more compaction in this turn
    compaction_blocked: bool = False
    #: the one compaction-and-retry for a context overflow is used
    overflow_retry_used: bool = False
    #: the user's next message interrupts this turn at its next safe point
    interrupted: bool = False
    #: the tool calls of the current response and where the walk is in them
    walk: ToolWalk = field(default_factory=ToolWalk)
    #: what the outstanding ``AskApproval`` asks: ``doom_loop`` or the gate's kind
    approval_kind: str = ""


class Next(enum.Enum):
    """The loop's next step after a collaborator's effects."""

    CALL_MODEL = "call_model"  # call the model with the conversation (a safe point)
    COMPACT = "compact"  # start a compaction (the summary call)
    WAIT_APPROVAL = "wait_approval"  # an ``AskApproval`` is out
    WAIT_TOOL = "wait_tool"  # a ``RunTool`` is out
    END_INTERRUPTED = "end_interrupted"  # the turn ends, interrupted (nothing streamed)
    TURN_LIMIT = "turn_limit"  # the turn made its last model call: it ends cut off


@dataclass(frozen=True)
class Proceed:
    """The response's tool calls are done: stop (``blocked`` by a denial, for ``reason``),
    finish, compact or call the model again (the loop decides which)."""

    blocked: bool = False
    reason: str = "normal"


#: the calls are done and nothing blocked the turn
PROCEED = Proceed()


@dataclass(frozen=True)
class StopSession:
    """The session cannot go on (``why``): ``result`` error and ``Exit(1)``."""

    why: str


#: what a collaborator step of the SDK loop leads to
Verdict = Next | Proceed | StopSession
