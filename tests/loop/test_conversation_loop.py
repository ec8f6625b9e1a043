"""The plain conversation loop: one model call per user message; it owns its input queue."""

from __future__ import annotations

from corvid_actors.events import Result
from corvid_actors.loop.conversation import ConversationLoop
from corvid_actors.loop.effects import CallModel, Emit, ModelSucceeded, TurnFinished, UserMessage
from corvid_actors.providers.base import ModelResponse


def reply(text: str) -> ModelSucceeded:
    return ModelSucceeded(ModelResponse(text=text))


def last_user_text(effects: list) -> str:
    calls = [e for e in effects if isinstance(e, CallModel)]
    assert len(calls) == 1, effects
    return calls[0].request.messages[-1].content


def test_a_message_sent_mid_turn_waits_for_the_turn_to_finish() -> None:
    loop = ConversationLoop(model="m", system_prompt="S")
    assert last_user_text(loop.start("first")) == "first"
    assert loop.handle(UserMessage("second")) == []  # one model call at a time
    assert loop.handle(UserMessage("third")) == []
    effects = loop.handle(reply("one"))
    finished = effects.index(TurnFinished())
    results = [e.event for e in effects[:finished] if isinstance(e, Emit) and isinstance(e.event, Result)]
    assert [r.result for r in results] == ["one"]
    # the next turn starts right after TurnFinished, with the oldest waiting message
    assert last_user_text(effects[finished + 1:]) == "second"
    assert last_user_text(loop.handle(reply("two"))) == "third"
    assert loop.handle(reply("three"))[-1] == TurnFinished()
    assert [m.content for m in loop.history] == ["first", "one", "second", "two", "third", "three"]


def test_abort_drops_waiting_messages_and_silences_the_loop() -> None:
    loop = ConversationLoop(model="m", system_prompt="S")
    loop.start("first")
    loop.handle(UserMessage("second"))
    assert loop.abort() == []
    assert loop.handle(reply("late")) == []
    assert loop.handle(UserMessage("more")) == []


def test_a_late_reply_when_no_call_is_outstanding_is_ignored() -> None:
    loop = ConversationLoop(model="m", system_prompt="S")
    loop.start("hi")
    loop.handle(reply("hello"))
    assert loop.handle(reply("stray")) == []
