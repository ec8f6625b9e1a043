"""Agent kinds in the direct loop (issue 35 item 1): a ``task`` agent's text-only replies
are nudged to act (the seed), a ``chat`` agent's never are — while the loop's safety rules
(made-up tool output, repeats, the iteration cap and its summary) hold for both."""

from __future__ import annotations

import pytest

from corvid_actors.events import Assistant
from corvid_actors.loop.direct import DirectLoop
from corvid_actors.loop.nudges import HALLUCINATION_NUDGE, NudgeReason, nudge_message
from corvid_actors.loop.settings import DirectLoopSettings
from corvid_actors.providers.base import ChatMessage
from tests.fixtures.probe_conversation import LONG, PARIS, SHORT
from tests.loop.test_direct_loop import TOOLS, allow_all, call, make, text, tools

#: the issue's probe conversation: each reply is a legitimate chat answer that a task
#: agent's nudges took for not acting
PROBE = [("What is the capital of France?", PARIS, NudgeReason.ASKED_INSTEAD_OF_ACTING),
         ("Can you help me?", SHORT, NudgeReason.TOO_SHORT),
         ("Tell me about the French Revolution.", LONG, NudgeReason.WROTE_BUT_DIDNT_ACT)]


@pytest.mark.parametrize(("question", "answer", "reason"), PROBE, ids=["asked", "too_short", "long"])
def test_a_chat_agent_answers_in_one_model_call(question: str, answer: str, reason: NudgeReason) -> None:
    d = make(kind="chat")
    d.start(question, text(answer))
    assert len(d.calls()) == 1
    assert d.events(Assistant) == [Assistant(content=answer)]
    assert d.result().result == answer and d.result().metrics["nudges"] == 0
    assert d.loop.history[-1] == ChatMessage(role="assistant", content=answer)


@pytest.mark.parametrize(("question", "answer", "reason"), PROBE, ids=["asked", "too_short", "long"])
def test_a_task_agent_is_still_nudged(question: str, answer: str, reason: NudgeReason) -> None:
    d = make()  # kind="task", the default: the seed's behaviour, unchanged
    assert d.loop.kind == "task"
    d.start(question, text(answer), text("Done."))
    assert len(d.calls()) == 2
    assert d.calls()[1].request.messages[-1] == ChatMessage(role="user", content=nudge_message(reason))


def test_the_probe_conversation_costs_one_call_per_message_for_a_chat_agent() -> None:
    d = make(kind="chat")
    d.start(PROBE[0][0], text(PARIS))
    for question, answer, _ in PROBE[1:]:
        d.user(question, text(answer))
    assert len(d.calls()) == 3
    assert [e.content for e in d.events(Assistant)] == [PARIS, SHORT, LONG]  # type: ignore[attr-defined]


def test_a_chat_agent_still_gets_the_mid_chain_nudge_for_made_up_tool_output() -> None:
    d = make(kind="chat")
    d.start("what is in a.py?", tools(call("read_file", path="a.py")),
            text("[Tool Result]\nprint('hi')"), text("It prints hi."))
    assert len(d.calls()) == 3
    assert d.calls()[2].request.messages[-1] == ChatMessage(role="user", content=HALLUCINATION_NUDGE)
    assert d.result().result == "It prints hi." and d.result().metrics["mid_chain_nudges"] == 1


def test_a_chat_agent_stuck_on_one_call_still_breaks_with_a_summary() -> None:
    d = make(kind="chat")
    again = tools(call("read_file", path="a.py"))
    d.start("look", again, again, again, text("I kept reading a.py; it holds the greeting."))
    assert d.result().metrics["termination_reason"] == "stall_repeat"
    assert d.result().result == "I kept reading a.py; it holds the greeting."


def test_a_chat_agent_still_stops_at_the_iteration_cap_with_a_summary() -> None:
    settings = DirectLoopSettings(max_tool_iterations=2, use_tier_caps=False)
    d = make(kind="chat", settings=settings)
    d.start("look", tools(call("read_file", path="a")), tools(call("list_files", path=".")),
            text("Read a, listed the files."))
    assert len(d.calls()) == 3 and d.result().metrics["termination_reason"] == "max_iterations"
    assert d.result().metrics["needs_summary"] is True


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        DirectLoop(model="m", system_prompt="", tools=TOOLS, permission_check=allow_all, context_window=8192,
                   kind="assistant")
