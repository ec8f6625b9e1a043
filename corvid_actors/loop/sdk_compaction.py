"""The SDK loop's compaction: when the context is summarised, and how.

Pure rules first — how much context a call used (:func:`context_tokens`), when that is
over the threshold (:func:`needs_compaction`), and what follows a processed response
(:func:`next_signal`) — then :class:`SdkCompaction`, the collaborator of
:class:`~corvid_actors.loop.sdk.SdkLoop` that runs a compaction: one summary call (tools
off, the compaction prompt), the conversation replaced by the summary and the turn's own
prompt, and no second compaction in a turn where one did not shrink the context; and the
payload-growth failsafe's trip, which compacts through that call (or stops). It works
on the :class:`~corvid_actors.loop.sdk_turn.SdkTurn` and the conversation it is given;
its own state is whether a compaction is due (which outlives a turn: a due compaction
runs before the next turn's first call) and whether the outstanding one was started by
the payload-growth failsafe.
"""

from __future__ import annotations

from typing import Literal

from corvid_actors.events import ContextUsage, SystemEvent, context_compacted
from corvid_actors.loop.effects import CallModel, Effect, Emit, PersistMessage
from corvid_actors.loop.payload_guard import GrowthCheck
from corvid_actors.loop.prompts import (
    COMPACTION_SYSTEM_PROMPT,
    compacted_user_message,
    compaction_request_text,
)
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.sdk_turn import Next, SdkTurn, StopSession
from corvid_actors.loop.settings import SdkLoopSettings
from corvid_actors.providers.base import ChatMessage, ModelRequest, ModelResponse, Usage

#: a step's effects and what the loop does next
Step = tuple[list[Effect], Next | StopSession]

#: what the loop does after a model response and its tool calls (the processor's signal,
#: plus "finish" for a turn that has nothing left to do)
LoopSignal = Literal["continue", "stop", "compact", "finish"]

PERCENT = 100.0


def context_tokens(usage: Usage) -> int:
    """Tokens of context a call used. Anthropic reports cached prompt tokens apart from
    ``input_tokens``, so all three count toward the window."""
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_creation_tokens


def needs_compaction(tokens: int, context_window: int, threshold: float) -> bool:
    """True when ``tokens`` exceed ``threshold`` × ``context_window`` (a window of 0
    means unknown: never compact)."""
    return context_window > 0 and tokens > threshold * context_window


def next_signal(*, blocked: bool, compaction_due: bool, calls_made: bool) -> LoopSignal:
    """What follows a processed response: ``stop`` (a denial blocked the turn), else
    ``finish`` (no tool was called: the turn is over), else ``compact`` (the context is
    over the threshold), else ``continue`` (call the model with the tool results).

    Unlike the processor seed, stop wins over compact (a human who denied a call gets no
    further model call) and a turn that is over does not compact; in both cases the due
    compaction runs before the next turn's first model call instead.
    """
    if blocked:
        return "stop"
    if not calls_made:
        return "finish"
    return "compact" if compaction_due else "continue"



class SdkCompaction:
    """The compaction of one SDK loop (see the module docstring).

    Owned by one :class:`~corvid_actors.loop.sdk.SdkLoop` and driven on its thread.
    """

    def __init__(self, *, rules: LoopRules, settings: SdkLoopSettings, model: str, window: int) -> None:
        self._rules = rules
        self._s = settings
        self._model = model
        self._window = window
        # a response reported a context over the threshold: compact before the next call
        self._due = False
        # a compaction started by the payload-growth failsafe is outstanding
        self._for_growth = False

    @property
    def due(self) -> bool:
        """A response reported a context over the threshold: compact before the next call."""
        return self._due

    def note(self, turn: SdkTurn, tokens: int) -> list[Effect]:
        """Record the context size of ``turn``'s last call and decide whether a compaction
        is due."""
        turn.last_context_tokens = tokens
        over = needs_compaction(tokens, self._window, self._s.compaction_threshold)
        effects: list[Effect] = []
        if turn.awaiting_shrink_check:
            turn.awaiting_shrink_check = False
            if over:
                # compacting again would summarise a summary for nothing: stop here
                turn.compaction_blocked = True
                effects.append(
                    Emit(
                        SystemEvent(
                            subtype="compaction_ineffective",
                            message=(
                                f"Context still at {tokens} tokens after compaction; "
                                "not compacting again this turn."
                            ),
                        )
                    )
                )
        self._due = over and not turn.compaction_blocked
        return effects

    def tripped(self, request: ModelRequest, verdict: GrowthCheck) -> Step:
        """The payload-growth failsafe tripped on ``request`` (not sent): ``COMPACT``
        (then an empty summary stops the session), or stop the session now."""
        effects, stop = self._rules.trip(request, verdict)
        if stop:
            return effects, StopSession("the request payload ballooned")
        self._rules.compacted()
        self._for_growth = True
        return effects, Next.COMPACT

    def request(self, messages: list[ChatMessage]) -> CallModel:
        """The summary call for ``messages`` (the loop sends it)."""
        text = compaction_request_text(messages, self._s.compaction_entry_max_chars)
        request = ModelRequest(
            model=self._model,
            system=COMPACTION_SYSTEM_PROMPT,
            messages=(ChatMessage(role="user", content=text),),
            tools=(),
        )
        return CallModel(request=request, purpose="compaction")

    def compacted(self, turn: SdkTurn, messages: list[ChatMessage],
                  response: ModelResponse) -> Step:
        """The summary call answered ``response``: ``messages`` become the summary and
        the turn's prompt, and the loop calls the model again (or stops the session)."""
        summary = response.text.strip()
        self._due = False
        for_growth, self._for_growth = self._for_growth, False
        if not summary and for_growth:
            # going on with the full conversation would send the runaway request
            return [], StopSession("compaction after payload growth returned no summary")
        if not summary:
            # nothing to continue from: keep the conversation, do not try again this turn
            turn.compaction_blocked = True
            note = "Compaction returned no summary; continuing with the full conversation."
            return [Emit(SystemEvent(subtype="compaction", message=note))], Next.CALL_MODEL
        before = len(messages)
        # the turn's own prompt, not "the last user message": after an earlier compaction
        # that would be the previous summary, and summaries would nest
        messages[:] = [
            ChatMessage(role="user", content=compacted_user_message(summary, turn.prompt))
        ]
        turn.awaiting_shrink_check = True
        turn.metrics.extra["compactions"] += 1
        note = f"Conversation compacted: {before} messages replaced by a summary."
        return [
            Emit(SystemEvent(subtype="compaction", message=note)),
            Emit(context_compacted()),
            PersistMessage(role="system", content=summary),
        ], Next.CALL_MODEL

    def usage(self, tokens: int, messages_count: int) -> ContextUsage:
        """The ``context_usage`` event for ``tokens`` of context over ``messages_count``
        messages."""
        percent = round(PERCENT * tokens / self._window, 1) if self._window > 0 else 0.0
        return ContextUsage(
            estimated_tokens=tokens,
            context_window=self._window,
            usage_percent=percent,
            messages_count=messages_count,
        )
