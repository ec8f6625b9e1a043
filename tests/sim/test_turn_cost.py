"""What one turn costs in messages, timer firings and SQL statements (issue 18 item 4):
counted, not timed. Each test is one session's life under the inline dispatcher, whose
trace lists every message handled; a count that grows again is a regression of the
simulated day's per-turn cost (``python -m bench.simtime``).

Given a chat session that answers one message and then waits for the next,
When it is stopped (or times out) and its incarnation ends,
Then each collaborator hears of it once, and no timer fires that has nothing to do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corvid_actors.actors.slots import SlotStats
from corvid_actors.actors.supervisor import SessionInfo
from corvid_actors.providers.base import ProviderTraits
from corvid_actors.testing import EventRecorder
from corvid_actors.testing.clock import SimClock
from corvid_actors.testing.scripted import ScriptedProvider
from corvid_actors.testing.sim import sim_runtime

MIN = 60.0


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[Any, ScriptedProvider, Counter[tuple[str, str]]]]:
    """An inline-dispatched runtime whose handled messages are counted by (actor, message)."""
    clock = SimClock()
    model = ScriptedProvider(clock)
    rt = sim_runtime(clock, model, workspace_dir=tmp_path / "workspace", dispatcher="inline")
    inline = rt.internals.tracker.inline
    assert inline is not None
    inline.trace = []
    counts: Counter[tuple[str, str]] = Counter()
    try:
        yield rt, model, counts
    finally:
        rt.shutdown()
        clock.close()


def _count(rt: Any, counts: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    rt.settle()
    counts.clear()
    counts.update(rt.internals.tracker.inline.trace)
    return counts


def test_a_session_that_asked_for_no_slot_and_no_approval_is_not_released_there(traced):
    # the scripted provider takes no slots and the reply calls no tool: the SlotPool and
    # the ApprovalBroker never heard of this session, so its end tells them nothing
    rt, model, counts = traced
    recorder = EventRecorder.attach(rt)
    model.reply("hello", latency_s=5)
    sid = rt.create_session(source="chat", participant="alice").id
    rt.start_process(sid, "hi")
    rt.clock.advance(10)
    rt.stop_process(sid)
    rt.start_process(sid, "again")
    rt.clock.advance(40 * MIN)  # the second incarnation times out
    assert [r.event.reason for r in recorder.of(sid, "session_stopped")] == ["user_stop", "timeout"]
    _count(rt, counts)
    assert counts[("SlotPool", "ReleaseSlot")] == 0
    assert counts[("ApprovalBroker", "CancelSession")] == 0


@pytest.mark.parametrize("end", ["stop", "timeout"])
def test_a_session_that_holds_a_slot_is_released_once_by_the_supervisor(tmp_path, end):
    clock = SimClock()
    model = ScriptedProvider(clock, traits=ProviderTraits(uses_slots=True, pid_kind="direct"))
    rt = sim_runtime(clock, model, workspace_dir=tmp_path / "workspace", dispatcher="inline",
                     loop_for_provider={"scripted": "direct"})  # the direct loop asks for slots
    try:
        inline = rt.internals.tracker.inline
        inline.trace = []
        model.reply("slow", latency_s=45 * MIN if end == "timeout" else 60)
        sid = rt.create_session(source="chat", participant="alice").id
        rt.start_process(sid, "hi")
        rt.clock.advance(10)
        assert rt.internals.slot_pool.ask(SlotStats())["in_use"] > 0  # mid-call: held
        if end == "stop":
            rt.stop_process(sid)
        rt.clock.advance(40 * MIN)
        rt.settle()
        stats = rt.internals.slot_pool.ask(SlotStats())
        assert stats["in_use"] == 0 and sid not in stats["held"]
        told = Counter(inline.trace)
        # once by the session giving it back, once by the supervisor's release at the end
        assert told[("SlotPool", "ReleaseSlot")] == 2
        assert told[("ApprovalBroker", "CancelSession")] == 1
    finally:
        rt.shutdown()
        clock.close()


def test_the_inactivity_timer_fires_once_when_the_session_is_due(traced):
    # the turn's activity moved the deadline past the timer armed at the start: the timer
    # is moved when the turn ends, not found early and re-armed then
    rt, model, counts = traced
    recorder = EventRecorder.attach(rt)
    model.reply("hello", latency_s=20)
    sid = rt.create_session(source="chat", participant="alice").id
    rt.start_process(sid, "hi")
    rt.clock.advance(40 * MIN)
    assert recorder.times("session_stopped", sid) == [20 + 30 * MIN]
    _count(rt, counts)
    # one check, by its own timer: the safety net (a poll period later) found nothing to wait for
    assert counts[("SessionActor", "TimeoutDue")] == 1
    assert counts[("SessionActor", "CheckTimeout")] == 0
    assert counts[("SessionSupervisor", "_FallbackCheck")] == 0


def test_a_message_after_the_turn_still_moves_the_deadline(traced):
    rt, model, counts = traced
    recorder = EventRecorder.attach(rt)
    model.reply("one", latency_s=5)
    model.reply("two", latency_s=5)
    sid = rt.create_session(source="chat", participant="alice").id
    rt.start_process(sid, "hi")
    rt.clock.advance(10 * MIN)
    assert rt.send_message(sid, "again")
    rt.clock.advance(40 * MIN)
    assert recorder.times("session_stopped", sid) == [10 * MIN + 5 + 30 * MIN]
    _count(rt, counts)
    # its own timer once (the safety net polls it every 60 s from 31 min on: it is old
    # enough to be overdue, as far as the supervisor can tell)
    assert counts[("SessionActor", "TimeoutDue")] == 1


def test_the_safety_net_still_stops_a_session_whose_own_timer_is_lost(traced):
    # seed invariant 10: the 60 s fallback behind each incarnation's own timeout
    rt, model, counts = traced
    recorder = EventRecorder.attach(rt)
    model.reply("hello", latency_s=5)
    sid = rt.create_session(source="chat", participant="alice").id
    rt.start_process(sid, "hi")
    rt.clock.advance(MIN)
    gen = rt.internals.supervisor.ask(SessionInfo(sid))[sid]["generation"]
    assert rt.internals.timers.cancel((sid, "timeout", gen))  # the session's own timer is gone
    rt.clock.advance(40 * MIN)
    # overdue at 5 s + 30 min; the net, a check interval after the first possible deadline
    # (30 min), finds it overdue
    assert recorder.times("session_stopped", sid) == [31 * MIN]
    assert recorder.last("session_stopped", sid).reason == "timeout"


def test_a_cold_resumed_turn_costs_a_bounded_number_of_sql_statements(traced):
    # the simulated day's turn: a chat session resumed with a message long after its last
    # incarnation timed out, answered, stopped by the inactivity timeout
    rt, model, counts = traced
    model.reply("one", latency_s=5)
    model.reply("two", latency_s=5)
    sid = rt.create_session(source="chat", participant="alice").id
    rt.start_process(sid, "hi")
    rt.clock.advance(40 * MIN)
    statements: list[str] = []
    connection = rt.internals.store.db.connection()  # the inline dispatcher's thread is this one
    connection.set_trace_callback(statements.append)
    try:
        assert not rt.send_message(sid, "again")
        rt.resume_process(sid, "again")
        rt.clock.advance(40 * MIN)
    finally:
        connection.set_trace_callback(None)
    # A trigger's program is traced as its statement again (Python passes the statement's
    # SQL, not SQLite's "-- TRIGGER" line): every message INSERT runs the turn-opening
    # trigger's test (db/turn_opening.py). Count statements, not trigger runs.
    statements = [s for i, s in enumerate(statements)
                  if not (i and s == statements[i - 1] and s.startswith('INSERT INTO "session_messages"'))]
    kinds = Counter(" ".join(s.split()[:3]) for s in statements)
    sweeps = kinds.pop('SELECT "t1"."id" FROM', 0)  # the orphan pruner's, every 5 minutes
    assert sweeps == 7
    assert kinds == {
        'SELECT * FROM': 1,  # the session row, read once
        'SELECT 0 AS': 1,  # history and exit notes, one read
        'INSERT INTO "session_messages"': 2,  # the user's message, the reply
        'UPDATE "sessions" SET': 3,  # running; the turn's usage; stopped
    }, statements


def test_a_message_to_a_session_with_no_incarnation_is_refused_without_the_supervisor(traced):
    # the live registry knows which sessions have an incarnation (building or live): with
    # none, send_message answers False itself, as the supervisor would, and stores nothing
    rt, model, counts = traced
    model.reply("hello", latency_s=5)
    sid = rt.create_session(source="chat", participant="alice").id
    assert rt.send_message(sid, "never started") is False
    rt.start_process(sid, "hi")
    rt.clock.advance(40 * MIN)  # answered, then timed out
    assert not rt.is_running(sid)
    assert rt.send_message(sid, "too late") is False
    # a new incarnation takes messages again (the registry follows its start)
    model.reply("again", latency_s=5)
    assert rt.resume_process(sid, "back") is not None
    rt.clock.advance(10)
    assert rt.send_message(sid, "and more") is True
    rt.clock.advance(10)
    _count(rt, counts)
    assert counts[("SessionSupervisor", "SendMessage")] == 0
    stored = [text for role, text in rt.internals.store.recent_messages(sid, 20) if role == "user"]
    assert "never started" not in stored and "too late" not in stored
    assert stored[-1] == "and more"


def test_a_handlers_run_of_events_reaches_the_bus_as_one_message(traced):
    # a session's life: started + provider notice (the supervisor, once built), thinking,
    # the reply's delta, assistant + result + thinking (one handler of the session), the
    # timeout's warning + session_stopped (the supervisor): five messages for nine events
    rt, model, counts = traced
    recorder = EventRecorder.attach(rt)
    model.reply("hello", latency_s=5)
    sid = rt.create_session(source="chat", participant="alice").id
    rt.start_process(sid, "hi")
    rt.clock.advance(40 * MIN)
    assert recorder.types(sid) == [
        "session_started", "system", "thinking", "content_block_delta", "assistant", "result", "thinking",
        "session_error", "session_stopped"]
    _count(rt, counts)
    assert counts[("EventBus", "PublishMany")] == 3
    assert counts[("EventBus", "Publish")] + counts[("EventBus", "PublishDeltas")] == 2
