"""turn.py: the input queue, turn accounting and the phases both agent loops share."""

from __future__ import annotations

from corvid_actors.events import Result
from corvid_actors.loop.effects import TurnMetrics, UserMessage
from corvid_actors.loop.turn import USAGE_FIELDS, InputQueue, Phase, TurnAccount
from corvid_actors.providers.base import ModelResponse, Usage


def test_an_idle_loop_starts_a_turn_with_the_message_at_once() -> None:
    queue = InputQueue()
    assert queue.offer(UserMessage("a"), idle=True) == UserMessage("a")
    assert len(queue) == 0


def test_messages_that_arrive_mid_turn_wait_and_come_out_first_in_first_out() -> None:
    queue = InputQueue()
    assert queue.offer(UserMessage("b"), idle=False) is None
    assert queue.offer(UserMessage("c"), idle=False) is None
    assert len(queue) == 2
    assert queue.next() == UserMessage("b")
    assert queue.next() == UserMessage("c")
    assert queue.next() is None


def test_an_idle_offer_behind_waiting_messages_starts_the_oldest_first() -> None:
    queue = InputQueue()
    queue.offer(UserMessage("old"), idle=False)
    assert queue.offer(UserMessage("new"), idle=True) == UserMessage("old")
    assert queue.next() == UserMessage("new")


def test_clear_drops_waiting_messages() -> None:
    queue = InputQueue()
    queue.offer(UserMessage("x"), idle=False)
    queue.clear()
    assert len(queue) == 0 and queue.next() is None


def test_multimodal_blocks_travel_with_the_queued_message() -> None:
    queue = InputQueue()
    message = UserMessage("look", blocks=({"type": "text", "text": "look"},))
    queue.offer(message, idle=False)
    assert queue.next() is message


def response(cost: float, **usage: int) -> ModelResponse:
    return ModelResponse(text="t", cost_usd=cost, usage=Usage(**usage))


def test_a_turn_adds_up_the_cost_and_every_usage_counter_of_its_calls() -> None:
    turn = TurnAccount()
    assert turn.usage == dict.fromkeys(USAGE_FIELDS, 0)
    turn.add(response(0.01, input_tokens=100, output_tokens=5, cache_read_tokens=20))
    turn.add(response(0.02, input_tokens=200, output_tokens=7, cache_creation_tokens=3))
    assert round(turn.cost_usd, 6) == 0.03
    assert turn.usage == {"input_tokens": 300, "output_tokens": 12,
                          "cache_read_tokens": 20, "cache_creation_tokens": 3}


def test_the_result_event_carries_the_accounting_and_the_metrics() -> None:
    turn = TurnAccount(metrics=TurnMetrics(iterations=2, tool_calls=1, extra={"model": "m"}))
    turn.add(response(0.5, input_tokens=10, output_tokens=2))
    turn.last_text = "all done"
    result = turn.result("success", num_turns=2)
    assert isinstance(result, Result)
    assert (result.subtype, result.num_turns, result.result, result.total_cost_usd) == (
        "success", 2, "all done", 0.5)
    assert result.usage["input_tokens"] == 10
    assert result.metrics["tool_calls"] == 1 and result.metrics["model"] == "m"
    # the usage is a copy: a later call does not change a published result
    turn.add(response(0.0, input_tokens=1))
    assert result.usage["input_tokens"] == 10


def test_the_result_text_may_be_given_instead_of_the_last_text() -> None:
    turn = TurnAccount(last_text="partial")
    assert turn.result("error", num_turns=0, text="invalid key").result == "invalid key"
    assert turn.result("error", num_turns=0).result == "partial"


def test_one_phase_enum_names_every_wait_of_both_loops() -> None:
    assert {p.name for p in Phase} == {
        "IDLE", "WAIT_SLOT", "WAIT_MODEL", "WAIT_RETRY", "TOOLS", "WAIT_APPROVAL", "WAIT_TOOL", "DONE",
    }
