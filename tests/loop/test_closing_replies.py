"""``loop.effects.closing_replies``: which reply in a list of effects closes its turn
(its row carries ``closes_turn``, so the reply and the close commit together — issue 36)
and which result's close it carries (that result's usage write then closes nothing)."""

from __future__ import annotations

from corvid_actors.events import Assistant, MessageStop, Result, Thinking
from corvid_actors.loop.effects import Emit, PersistMessage, TurnFinished, closing_replies


def test_a_reply_and_its_success_close_together() -> None:
    effects = [Emit(Assistant(content="4")), Emit(MessageStop()), Emit(Result(subtype="success")),
               Emit(Thinking(thinking=False)), TurnFinished()]
    assert closing_replies(effects) == {0, 2}


def test_the_last_reply_before_the_result_is_the_one_that_closes() -> None:
    effects = [Emit(Assistant(content="let me look")), Emit(Assistant(content="found it")),
               PersistMessage(role="assistant", content="found it"),  # other effects between do not matter
               Emit(Result(subtype="interrupted"))]
    assert closing_replies(effects) == {1, 3}


def test_a_result_that_does_not_close_or_comes_without_a_reply_marks_nothing() -> None:
    assert closing_replies([Emit(Assistant(content="partial")), Emit(Result(subtype="error"))]) == set()
    assert closing_replies([Emit(Assistant(content="")), Emit(Result(subtype="success"))]) == set()
    assert closing_replies([Emit(Result(subtype="success"))]) == set()
    assert closing_replies([Emit(Assistant(content="before the tools"))]) == set()  # the result comes later


def test_two_turns_in_one_list_each_close_with_their_own_reply() -> None:
    effects = [Emit(Assistant(content="one")), Emit(Result(subtype="success")), TurnFinished(),
               Emit(Result(subtype="success")),  # a turn of its own without a reply: closed by its usage
               Emit(Assistant(content="two")), Emit(Result(subtype="interrupted"))]
    assert closing_replies(effects) == {0, 1, 4, 5}
