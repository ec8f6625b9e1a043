"""Issue 37 item 2: ``send_message`` to a running session stores the message and counts
its turn open in one statement; the session counts the turn in memory only.

Given a running session waiting for its user,
When a message is sent to it,
Then once ``send_message`` returns the message is stored and the turn counted open
(``open_turns``, ``total_turns``) — a crash before the turn starts leaves both, and the
next runtime answers it — and the turn's result closes it; a turn the session does not
start (a spending cap) is taken off the count again.
"""

from __future__ import annotations

import pytest

from corvid_actors.testing import EventRecorder, Turn, kill_runtime, sim_runtime


def turns(rt, sid):
    row = rt.internals.store.get_session(sid)
    return (row.open_turns, row.total_turns)


def test_a_returned_send_has_counted_its_turn_open_and_the_result_closes_it(runtime, scripted):
    sid = runtime.create_session(source="web").id
    runtime.start_process(sid, "one")
    runtime.settle()
    assert turns(runtime, sid) == (0, 1)
    assert runtime.send_message(sid, "two") is True
    assert turns(runtime, sid) == (1, 2)  # before the session took the message
    runtime.settle()
    assert turns(runtime, sid) == (0, 2)
    assert runtime.session_info(sid)[sid]["turns"] == 2


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'corvid.db'}"


def test_a_crash_between_the_send_and_the_turn_start_keeps_the_turn_and_the_restart_answers(sim_clock, scripted, url):
    first = sim_runtime(sim_clock, scripted, store_url=url)
    sid = first.create_session(source="web").id
    # the first turn's model call takes 30 s: "two" waits behind it, its turn not started
    scripted.for_session(sid, Turn.reply("never heard", latency_s=30), Turn.reply("one, after the restart"),
                         Turn.reply("two, after the restart"))
    first.start_process(sid, "one")
    sim_clock.advance(10)
    assert first.send_message(sid, "two") is True
    kill_runtime(first)  # as by kill -9: nothing written on the way down

    second = sim_runtime(sim_clock, scripted, store_url=url)
    try:
        assert turns(second, sid) == (2, 2)  # the running turn and the one "two" opened
        later = EventRecorder.attach(second)
        assert second.resume_pending_sessions() == [sid]
        second.settle()
        # both open turns are answered, each as its own turn, in order (issue 36 item 2)
        assert [r.event.content for r in later.of(sid, "assistant")] == [
            "one, after the restart", "two, after the restart"]
        assert "[User]: one" in scripted.requests_for(sid)[-2].messages[-1].content  # the resume's history
        assert turns(second, sid)[0] == 0
    finally:
        second.shutdown()


def test_a_sent_turn_refused_by_the_spending_cap_is_taken_off_the_count(runtime, scripted):
    agent = runtime.create_agent("capped")
    runtime.update_agent(agent.id, max_budget_usd=0.05)
    sid = runtime.create_session(agent_id=agent.id, source="web").id
    scripted.for_session(sid, Turn.reply("first", cost_usd=0.06))
    runtime.start_process(sid, "one")
    runtime.settle()
    assert turns(runtime, sid) == (0, 1)
    assert runtime.send_message(sid, "two") is True  # stored as sent, its turn not started
    runtime.settle()
    assert turns(runtime, sid) == (0, 1)
    assert runtime.session_info(sid)[sid]["turns"] == 1
