"""The plain conversation loop: one model turn per user message, no tools.

Used for providers that have no agentic loop of their own (the scripted provider in
simulations, chat-only agents). Rules:

- each user message → one model call with the whole conversation;
- a retryable provider error → report an outage (the supervisor pauses the session);
- any other provider error → ``error`` event and exit 1 (a crash: chat sessions restart);
- a user message that arrives while a turn runs waits in the loop's :class:`InputQueue`
  and starts the next turn right after ``TurnFinished``;
- :class:`InterruptTurn` (double texting ``interrupt``) with a message waiting cuts the
  model stream (``StopModelCall``): what it streamed is kept, marked interrupted, and the
  waiting message's turn starts with it in the conversation.
"""

from __future__ import annotations

from collections.abc import Sequence

from corvid_actors.events import Assistant, ErrorEvent, Result, Thinking
from corvid_actors.loop.effects import (
    CallModel,
    Effect,
    Emit,
    Exit,
    InterruptTurn,
    LoopInput,
    ModelFailed,
    ModelStopped,
    ModelSucceeded,
    ReportOutage,
    StopModelCall,
    TurnFinished,
    UserMessage,
)
from corvid_actors.loop.turn import InputQueue, Phase, interrupted_reply
from corvid_actors.providers.base import ChatMessage, ErrorKind, ModelRequest


class ConversationLoop:
    """The plain conversation loop of one session (see the module docstring)."""

    def __init__(self, *, model: str, system_prompt: str, history: Sequence[ChatMessage] = ()) -> None:
        self._model = model
        self._system = system_prompt
        self._messages: list[ChatMessage] = list(history)
        self._turns = 0
        self._phase = Phase.IDLE
        self._queue = InputQueue()

    @property
    def history(self) -> list[ChatMessage]:
        return list(self._messages)

    def start(self, prompt: str | UserMessage) -> list[Effect]:
        return self._user_turn(UserMessage.of(prompt))

    def handle(self, event: LoopInput) -> list[Effect]:
        if self._phase is Phase.DONE:
            return []
        match event:
            case UserMessage():
                first = self._queue.offer(event, idle=self._phase is Phase.IDLE)
                return [] if first is None else self._user_turn(first)
            case ModelSucceeded(response) if self._phase is Phase.WAIT_MODEL:
                self._messages.append(ChatMessage("assistant", response.text))
                self._turns += 1
                effects: list[Effect] = []
                if response.text:
                    effects.append(Emit(Assistant(content=response.text)))
                usage = response.usage
                effects += [
                    Emit(Result(
                        subtype="success", total_cost_usd=response.cost_usd, num_turns=1,
                        result=response.text,
                        usage={"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
                    )),
                    Emit(Thinking(thinking=False)),
                    TurnFinished(),
                ]
                self._phase = Phase.IDLE
                waiting = self._queue.next()
                return effects if waiting is None else effects + self._user_turn(waiting)
            case InterruptTurn() if self._phase is Phase.WAIT_MODEL and self._queue:
                return [StopModelCall()]
            case ModelStopped(text) if self._phase is Phase.WAIT_MODEL:
                reply = interrupted_reply(text)
                self._messages.append(ChatMessage("assistant", reply))
                self._turns += 1
                self._phase = Phase.IDLE
                ended: list[Effect] = [Emit(Assistant(content=reply, interrupted=True)),
                                       Emit(Result(subtype="interrupted", num_turns=1, result=reply)),
                                       Emit(Thinking(thinking=False)), TurnFinished()]
                waiting = self._queue.next()
                return ended if waiting is None else ended + self._user_turn(waiting)
            case ModelFailed(error) if self._phase is Phase.WAIT_MODEL:
                if error.kind is ErrorKind.RETRYABLE:
                    self._phase = Phase.IDLE
                    return [ReportOutage(error.message)]
                self._phase = Phase.DONE
                return [
                    Emit(Result(subtype="error", result=error.message)),
                    Emit(ErrorEvent(error_type="provider_error", message=error.message)),
                    Exit(1),
                ]
        return []

    def abort(self) -> list[Effect]:
        """Silence from now on; waiting messages are dropped; no clean-up effects."""
        self._phase = Phase.DONE
        self._queue.clear()
        return []

    def _user_turn(self, message: UserMessage) -> list[Effect]:
        self._messages.append(ChatMessage("user", message.text, blocks=message.blocks))
        request = ModelRequest(model=self._model, system=self._system, messages=tuple(self._messages))
        self._phase = Phase.WAIT_MODEL
        return [Emit(Thinking(thinking=True)), CallModel(request)]
