"""The SDK loop's compaction: when the context is summarised, and how.

Pure rules first — how much context a call used (:func:`context_tokens`), when that is
over the threshold (:func:`needs_compaction`), and what follows a processed response
(:func:`next_signal`) — then :class:`SdkCompaction`, the part of
:class:`~corvid_actors.loop.sdk.SdkLoop` that runs a compaction: one summary call (tools
off, the compaction prompt), the conversation replaced by the summary and the turn's own
prompt, and no second compaction in a turn where one did not shrink the context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from corvid_actors.events import ContextUsage, SystemEvent, context_compacted
from corvid_actors.loop.effects import CallModel, Effect, Emit, PersistMessage
from corvid_actors.loop.prompts import (
    COMPACTION_SYSTEM_PROMPT,
    compacted_user_message,
    compaction_request_text,
)
from corvid_actors.loop.rules import LoopRules
from corvid_actors.providers.base import ChatMessage, ModelRequest, ModelResponse, Usage

if TYPE_CHECKING:  # sdk.py imports this module
    from corvid_actors.loop.sdk import _Turn
    from corvid_actors.loop.settings import SdkLoopSettings

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
    """The compaction part of the SDK loop (see the module docstring)."""

    _turn: _Turn
    _messages: list[ChatMessage]
    _s: SdkLoopSettings
    _rules: LoopRules
    _model: str
    _window: int
    _compact_due: bool
    _growth_compaction: bool

    if TYPE_CHECKING:  # the loop's own steps (SdkLoop)

        def _send(self, call: CallModel) -> list[Effect]: ...

        def _call_model(self) -> list[Effect]: ...

        def _stop_for_growth(self, why: str) -> list[Effect]: ...

    def _note_context(self, tokens: int) -> list[Effect]:
        """Record the context size and decide whether a compaction is due."""
        turn = self._turn
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
        self._compact_due = over and not turn.compaction_blocked
        return effects

    def _start_compaction(self) -> list[Effect]:
        self._messages = self._rules.prepare_history(self._messages)
        text = compaction_request_text(self._messages, self._s.compaction_entry_max_chars)
        request = ModelRequest(
            model=self._model,
            system=COMPACTION_SYSTEM_PROMPT,
            messages=(ChatMessage(role="user", content=text),),
            tools=(),
        )
        return self._send(CallModel(request=request, purpose="compaction"))

    def _on_compacted(self, response: ModelResponse) -> list[Effect]:
        turn = self._turn
        summary = response.text.strip()
        self._compact_due = False
        for_growth, self._growth_compaction = self._growth_compaction, False
        if not summary and for_growth:
            # going on with the full conversation would send the runaway request
            return self._stop_for_growth("compaction after payload growth returned no summary")
        if not summary:
            # nothing to continue from: keep the conversation, do not try again this turn
            turn.compaction_blocked = True
            note = "Compaction returned no summary; continuing with the full conversation."
            return [Emit(SystemEvent(subtype="compaction", message=note)), *self._call_model()]
        before = len(self._messages)
        # the turn's own prompt, not "the last user message": after an earlier compaction
        # that would be the previous summary, and summaries would nest
        self._messages = [
            ChatMessage(role="user", content=compacted_user_message(summary, turn.prompt))
        ]
        turn.awaiting_shrink_check = True
        turn.metrics.extra["compactions"] += 1
        note = f"Conversation compacted: {before} messages replaced by a summary."
        return [
            Emit(SystemEvent(subtype="compaction", message=note)),
            Emit(context_compacted()),
            PersistMessage(role="system", content=summary),
            *self._call_model(),
        ]

    def _context_usage(self, tokens: int) -> ContextUsage:
        percent = round(PERCENT * tokens / self._window, 1) if self._window > 0 else 0.0
        return ContextUsage(
            estimated_tokens=tokens,
            context_window=self._window,
            usage_percent=percent,
            messages_count=len(self._messages),
        )
