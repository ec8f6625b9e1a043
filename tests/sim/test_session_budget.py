"""A spending cap holds in the session itself (issue 35 item 7): whoever starts a turn —
``Runtime.send_message``, ``start_process``, a message queued behind a running turn — the
session checks its agent's caps before the turn starts.

Given an agent with ``max_budget_usd`` (per session) or ``max_total_budget_usd`` (all its
sessions),
When a turn would start once the spend has reached the cap,
Then the model is not called, the session gets one ``session_error`` of type
``budget_exceeded`` (a warning, not recoverable), the user message stays stored as sent,
and the session waits for its user.
"""

from __future__ import annotations

import pytest

from corvid_actors.testing import Turn


def user_messages(rt, sid):
    return [m.content for m in rt.internals.store.messages(sid) if m.role == "user"]


def budget_errors(recorder, sid):
    return [(r.event.error_type, r.event.severity, r.event.recoverable) for r in recorder.of(sid, "session_error")]


REFUSED = [("budget_exceeded", "warning", False)]


def test_send_message_to_a_session_at_its_cap_starts_no_turn(runtime, scripted, recorder):
    agent = runtime.create_agent("capped")
    runtime.update_agent(agent.id, max_budget_usd=0.05)
    s = runtime.create_session(agent_id=agent.id, source="web")
    scripted.for_session(s.id, Turn.reply("first", cost_usd=0.06), Turn.reply("after the raise"))
    runtime.start_process(s.id, "one")
    runtime.settle()
    assert runtime.send_message(s.id, "two") is True  # stored as sent
    runtime.settle()
    runtime.clock.advance(60)
    assert len(scripted.requests_for(s.id)) == 1
    assert budget_errors(recorder, s.id) == REFUSED
    [error] = recorder.of(s.id, "session_error")
    assert error.event.message.startswith("This session has reached its spending cap ($0.06 of $0.05)")
    assert user_messages(runtime, s.id) == ["one", "two"]
    assert runtime.is_running(s.id)  # it waits for its user
    assert runtime.session_info(s.id)[s.id]["in_turn"] is False
    # a cap raised since the session started lets the next message be answered
    runtime.update_agent(agent.id, max_budget_usd=1.0)
    runtime.send_message(s.id, "three")
    runtime.settle()
    assert [r.messages[-1].content for r in scripted.requests_for(s.id)] == ["one", "three"]
    assert budget_errors(recorder, s.id) == REFUSED


def test_start_process_on_a_session_at_its_cap_starts_no_turn(runtime, scripted, recorder):
    agent = runtime.create_agent("capped")
    runtime.update_agent(agent.id, max_budget_usd=0.05)
    s = runtime.create_session(agent_id=agent.id, source="web")
    # spent before this runtime hosted it (another daemon, an earlier run): the stored total counts
    runtime.internals.store.add_session_usage(s.id, cost_usd=0.05, turns=1)
    scripted.for_session(s.id, "never")
    runtime.start_process(s.id, "hello")
    runtime.settle()
    runtime.clock.advance(60)
    assert scripted.requests_for(s.id) == []
    assert budget_errors(recorder, s.id) == REFUSED
    assert user_messages(runtime, s.id) == ["hello"]
    assert runtime.is_running(s.id)
    # the next message is checked as well: still no model call, one more error
    runtime.send_message(s.id, "again")
    runtime.settle()
    assert scripted.requests_for(s.id) == []
    assert budget_errors(recorder, s.id) == REFUSED * 2


def test_a_message_queued_behind_the_turn_that_crosses_the_cap_is_not_answered(runtime, scripted, recorder):
    agent = runtime.create_agent("capped", double_texting="enqueue")
    runtime.update_agent(agent.id, max_budget_usd=0.05)
    s = runtime.create_session(agent_id=agent.id, source="web")
    scripted.for_session(s.id, Turn.reply("slow and dear", latency_s=5, cost_usd=0.06), "never")
    runtime.start_process(s.id, "one")
    runtime.settle()
    runtime.clock.advance(2)
    assert runtime.send_message(s.id, "two") is True  # mid-turn: it waits for the first turn
    runtime.clock.advance(60)
    assert len(scripted.requests_for(s.id)) == 1
    assert [r.event.content for r in recorder.of(s.id, "assistant")] == ["slow and dear"]
    assert budget_errors(recorder, s.id) == REFUSED
    assert user_messages(runtime, s.id) == ["one", "two"]
    assert runtime.session_info(s.id)[s.id]["in_turn"] is False


def test_a_message_queued_behind_a_turn_under_the_cap_is_answered(runtime, scripted, recorder):
    agent = runtime.create_agent("capped", double_texting="enqueue")
    runtime.update_agent(agent.id, max_budget_usd=0.05)
    s = runtime.create_session(agent_id=agent.id, source="web")
    scripted.for_session(s.id, Turn.reply("slow", latency_s=5, cost_usd=0.01), Turn.reply("second"))
    runtime.start_process(s.id, "one")
    runtime.settle()
    runtime.clock.advance(2)
    runtime.send_message(s.id, "two")
    runtime.clock.advance(60)
    assert [r.event.content for r in recorder.of(s.id, "assistant")] == ["slow", "second"]
    assert recorder.of(s.id, "session_error") == []


def test_the_agents_cap_counts_every_session_for_send_message(runtime, scripted, recorder):
    agent = runtime.create_agent("capped")
    runtime.update_agent(agent.id, max_total_budget_usd=0.05)
    a = runtime.create_session(agent_id=agent.id, source="web")
    b = runtime.create_session(agent_id=agent.id, source="web")
    scripted.for_session(a.id, Turn.reply("for a", cost_usd=0.03), "never")
    scripted.for_session(b.id, Turn.reply("for b", cost_usd=0.03), "never")
    runtime.start_process(a.id, "from a")
    runtime.settle()
    runtime.start_process(b.id, "from b")  # the agent has spent $0.03: under its cap
    runtime.settle()
    assert runtime.spend(a.id).agent_usd == pytest.approx(0.06)
    for s in (a, b):
        runtime.send_message(s.id, "more")
        runtime.settle()
        assert len(scripted.requests_for(s.id)) == 1
        assert budget_errors(recorder, s.id) == REFUSED
        [error] = recorder.of(s.id, "session_error")
        assert "max_total_budget_usd" in error.event.message
    assert user_messages(runtime, a.id) == ["from a", "more"]
