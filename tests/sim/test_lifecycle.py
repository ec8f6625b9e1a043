"""Process-manager seed: start, stop, send, 1:1 mapping, events and cleanup."""

from __future__ import annotations

import pytest

from corvid_actors.errors import NotFoundError
from corvid_actors.events import SessionStarted, SessionStopped

from .conftest import lifecycle


def test_start_emits_started_then_reply_and_marks_running(runtime, scripted, recorder, web_session):
    scripted.reply("Hello!", deltas=3)
    pid = runtime.start_process(web_session.id, "hi")
    runtime.settle()
    assert pid == 800000  # direct pseudo-PIDs count from 800000
    assert runtime.is_running(web_session.id)
    row = runtime.internals.store.get_session(web_session.id)
    assert (row.status, row.pid) == ("running", pid)
    assert [r.type for r in recorder.of(web_session.id)][:3] == ["session_started", "system", "thinking"]
    assert "".join(r.event.text for r in recorder.of(web_session.id, "content_block_delta")) == "Hello!"
    assert runtime.internals.store.recent_messages(web_session.id, 10) == [("user", "hi"), ("assistant", "Hello!")]


def test_second_start_kills_the_first_incarnation(runtime, scripted, recorder, web_session):
    scripted.reply("slow one", latency_s=60)
    first = runtime.start_process(web_session.id, "one")
    runtime.settle()
    second = runtime.start_process(web_session.id, "two")
    runtime.settle()
    runtime.clock.advance(120)
    assert second == first + 1
    assert runtime.get_active_session_ids() == [web_session.id]
    stopped = recorder.of(web_session.id, "session_stopped")
    assert [s.event.reason for s in stopped] == ["replaced"]
    # the first incarnation's slow reply never arrives: nothing from it after its stop
    assert [r.event.content for r in recorder.of(web_session.id, "assistant")] == ["ok"]
    starts = [r.event for r in recorder.of(web_session.id, "session_started")]
    assert [s.generation for s in starts] == [1, 2]


def test_send_message_persists_first_and_returns_false_when_not_running(runtime, scripted, web_session):
    assert runtime.send_message(web_session.id, "nobody home") is False
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    assert runtime.send_message(web_session.id, "second") is True
    # persisted before send_message returned (before settle)
    assert runtime.internals.store.recent_messages(web_session.id, 10)[-1][1] in ("second", "ok")
    runtime.settle()
    assert [m for m in runtime.internals.store.recent_messages(web_session.id, 10) if m[0] == "user"] == [
        ("user", "hi"), ("user", "second")]
    assert runtime.internals.store.get_session(web_session.id).total_turns == 2  # the opening prompt is turn 1


def test_stop_emits_stopped_before_subscribers_are_removed(runtime, scripted, web_session):
    seen = []
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    runtime.subscribe(web_session.id, lambda sid, ev: seen.append(ev.type))
    runtime.stop_process(web_session.id)
    runtime.settle()
    assert seen[-1] == "session_stopped"
    assert runtime.internals.store.get_session(web_session.id).status == "stopped"
    assert runtime.internals.store.get_session(web_session.id).pid is None
    assert runtime.get_memory_stats()["subscribers"] == 0


def test_stop_of_a_ghost_session_still_marks_it_stopped(runtime, recorder, arrange, web_session):
    arrange.stale_running(web_session.id, pid=4242)
    runtime.stop_process(web_session.id)
    runtime.settle()
    row = runtime.internals.store.get_session(web_session.id)
    assert (row.status, row.pid) == ("stopped", None)
    assert recorder.types(web_session.id) == ["session_stopped"]


def test_stop_during_model_call_takes_effect_at_once_and_cancels_the_call(runtime, scripted, recorder,
                                                                          web_session):
    scripted.reply("never delivered", latency_s=600)
    runtime.start_process(web_session.id, "hi")
    runtime.settle()  # returns although the call is in flight: the worker is parked on the clock
    runtime.stop_process(web_session.id)
    runtime.settle()
    assert not runtime.is_running(web_session.id)
    runtime.clock.advance(700)
    assert recorder.of(web_session.id, "assistant") == []
    assert recorder.types(web_session.id)[-1] == "session_stopped"


def test_late_subscriber_of_a_running_session_is_told_it_is_thinking(runtime, scripted, web_session):
    scripted.reply("thinking hard", latency_s=30)
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    seen = []
    runtime.subscribe(web_session.id, lambda sid, ev: seen.append((ev.type, getattr(ev, "thinking", None))))
    runtime.settle()
    assert seen == [("thinking", True)]


def test_a_subscriber_that_raises_does_not_break_delivery(runtime, scripted, web_session):
    seen = []

    def bad(sid, ev):
        raise RuntimeError("subscriber bug")

    runtime.subscribe(web_session.id, bad)
    runtime.subscribe(web_session.id, lambda sid, ev: seen.append(ev.type))
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    assert "assistant" in seen and "result" in seen


def test_unknown_session_raises_not_found(runtime):
    with pytest.raises(NotFoundError):
        runtime.start_process("no-such-session", "hi")


def test_missing_project_emits_not_found_and_does_not_start(runtime, recorder, arrange, tmp_path):
    project = runtime.create_project("gone", tmp_path)
    session = runtime.create_session(project_id=project.id)
    arrange.project_deleted(session.id)
    assert runtime.start_process(session.id, "hi") is None
    runtime.settle()
    assert [(r.type, r.event.error_type) for r in recorder.of(session.id)] == [("error", "not_found")]
    assert not runtime.is_running(session.id)


def test_spawn_failure_sets_error_status_and_emits_spawn_error(runtime, recorder):
    agent = runtime.create_agent("misrouted", provider="no-such-provider")
    session = runtime.create_session(agent_id=agent.id)
    assert runtime.start_process(session.id, "hi") is None
    runtime.settle()
    events = recorder.of(session.id)
    assert [(r.type, r.event.error_type) for r in events] == [("error", "spawn_error"),
                                                              ("session_error", "spawn_error")]
    assert "no-such-provider" in events[0].event.message
    assert (events[1].event.severity, events[1].event.recoverable) == ("fatal", False)
    assert events[1].event.message == events[0].event.message
    assert runtime.internals.store.get_session(session.id).status == "error"


def test_cleanup_is_idempotent_and_memory_stats_return_to_zero(runtime, scripted, web_session):
    runtime.start_process(web_session.id, "hi")
    runtime.subscribe(web_session.id, lambda sid, ev: None)
    runtime.settle()
    runtime.cleanup_session_state(web_session.id)
    runtime.cleanup_session_state(web_session.id)
    runtime.settle()
    stats = runtime.get_memory_stats()
    assert stats["processes"] == 0
    assert stats["session_meta"] == 0
    assert stats["subscribers"] == 0
    assert stats["session_timeouts"] == 0


def test_orphan_subscribers_are_pruned_every_five_minutes(runtime, web_session, chat_session):
    runtime.start_process(chat_session.id, "keep me busy")
    runtime.subscribe(web_session.id, lambda sid, ev: None)  # never started: an orphan
    runtime.settle()
    assert runtime.get_memory_stats()["subscribers"] == 1
    runtime.clock.advance(299)
    assert runtime.get_memory_stats()["subscribers"] == 1
    runtime.clock.advance(1)
    assert runtime.get_memory_stats()["subscribers"] == 0


def test_stale_running_sessions_are_reset_at_start_up(sim_clock, scripted, tmp_path):
    from corvid_actors.testing import arrange, sim_runtime

    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    first = sim_runtime(sim_clock, scripted, store_url=url)
    session = first.create_session(source="web")
    arrange(first).stale_running(session.id, pid=800123)
    first.shutdown()
    second = sim_runtime(sim_clock, scripted, store_url=url)
    try:
        row = second.internals.store.get_session(session.id)
        assert (row.status, row.pid, row.restart_pending) == ("idle", None, True)
        assert second.stale_session_ids == [session.id]
        assert second.resume_pending_sessions() == [session.id]
        second.settle()
        assert second.is_running(session.id)
    finally:
        second.shutdown()


def test_shutdown_stops_sessions_with_server_shutdown_and_marks_them_for_resume(sim_clock, scripted, tmp_path):
    from corvid_actors.testing import EventRecorder, sim_runtime

    rt = sim_runtime(sim_clock, scripted)
    rec = EventRecorder.attach(rt)
    sessions = [rt.create_session(source="web") for _ in range(3)]
    for s in sessions:
        rt.start_process(s.id, "hi")
    rt.settle()
    store = rt.internals.store
    rt.stop_sessions()  # shutdown's supervisor half: the in-memory DB stays readable
    for s in sessions:
        assert isinstance(rec.of(s.id)[-1].event, SessionStopped)
        assert rec.of(s.id)[-1].event.reason == "server_shutdown"
        assert store.get_session(s.id).restart_pending is True
    assert isinstance(rec.of(sessions[0].id)[0].event, SessionStarted)
    rt.shutdown()


def test_events_of_one_incarnation_form_a_well_formed_log(runtime, scripted, recorder, chat_session):
    scripted.reply("one")
    scripted.crash("boom")
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    runtime.send_message(chat_session.id, "again")
    runtime.settle()
    runtime.clock.advance(10)
    log = lifecycle(recorder, chat_session.id)
    assert log == [
        (0.0, "session_started"), (0.0, "assistant"), (0.0, "result"),
        (0.0, "result"), (0.0, "error"), (0.0, "session_error"), (0.0, "session_exited"),
        (0.0, "session_restarting"),
        (5.0, "session_started"), (5.0, "assistant"), (5.0, "result"),
    ]


def test_shutdown_marks_every_kind_of_session_as_one_session_at_a_time_did(sim_clock, scripted):
    """Running, paused, waiting for a crash restart, deleted while running, never started:
    the batched marking leaves each row as the per-session writes did, and every running
    session hears session_stopped(server_shutdown) once, after its row was written."""
    from corvid_actors.events import SessionPaused, SessionRestarting
    from corvid_actors.testing import EventRecorder, arrange, sim_runtime

    rt = sim_runtime(sim_clock, scripted)
    rec = EventRecorder.attach(rt)
    running = [rt.create_session(source="web") for _ in range(3)]
    paused, crashed, deleted, never = (rt.create_session(source="chat") for _ in range(4))
    for s in running:
        rt.start_process(s.id, "hi")
        rt.settle()
    scripted.outage("connection refused")
    rt.start_process(paused.id, "hi")
    rt.settle()
    scripted.crash("boom")
    rt.start_process(crashed.id, "hi")
    rt.settle()
    rt.start_process(deleted.id, "hi")
    rt.settle()
    assert isinstance(rec.of(paused.id)[-1].event, SessionPaused)
    assert isinstance(rec.of(crashed.id)[-1].event, SessionRestarting)
    assert arrange(rt).session_deleted(deleted.id)
    store = rt.internals.store
    rows_at_stop: dict[str, tuple] = {}

    def on_event(sid, event):
        if isinstance(event, SessionStopped):
            row = store.get_session(sid)
            rows_at_stop[sid] = (row.status, row.restart_pending) if row is not None else None

    rt.subscribe_all(on_event)
    rt.stop_sessions()  # shutdown's supervisor half: the in-memory DB stays readable
    for s in running:
        row = store.get_session(s.id)
        assert (row.status, row.pid, row.restart_pending) == ("stopped", None, True)
        stops = [r.event for r in rec.of(s.id) if isinstance(r.event, SessionStopped)]
        assert [e.reason for e in stops] == ["server_shutdown"]
        assert rows_at_stop[s.id] == ("stopped", True)  # written before the event went out
    assert (store.get_session(paused.id).status, store.get_session(paused.id).restart_pending) == ("paused", True)
    assert (store.get_session(crashed.id).status, store.get_session(crashed.id).restart_pending) == ("error", True)
    assert store.get_session(deleted.id) is None
    assert [e.reason for e in (r.event for r in rec.of(deleted.id)) if isinstance(e, SessionStopped)] == [
        "server_shutdown"]
    assert store.get_session(never.id).restart_pending is False
    assert not any(isinstance(r.event, SessionStopped) for r in rec.of(paused.id) + rec.of(crashed.id))
    assert sorted(store.take_restart_pending()) == sorted([s.id for s in running] + [paused.id, crashed.id])
    rt.shutdown()


def test_shutdown_marks_one_by_one_when_the_batched_marking_is_refused(sim_clock, scripted):
    from corvid_actors.events import SessionPaused
    from corvid_actors.testing import EventRecorder, StoreFault, sim_runtime

    rt = sim_runtime(sim_clock, scripted)
    rec = EventRecorder.attach(rt)
    running = [rt.create_session(source="web") for _ in range(3)]
    paused = rt.create_session(source="chat")
    for s in running:
        rt.start_process(s.id, "hi")
        rt.settle()
    scripted.outage("connection refused")
    rt.start_process(paused.id, "hi")
    rt.settle()
    assert isinstance(rec.of(paused.id)[-1].event, SessionPaused)
    store = rt.internals.store
    with StoreFault(store, "mark_for_resume", times=None) as fault:
        rt.stop_sessions()
    assert fault.raised == 2  # the running batch and the pending batch
    for s in running:
        row = store.get_session(s.id)
        assert (row.status, row.pid, row.restart_pending) == ("stopped", None, True)
        assert [r.event.reason for r in rec.of(s.id) if isinstance(r.event, SessionStopped)] == ["server_shutdown"]
    assert (store.get_session(paused.id).status, store.get_session(paused.id).restart_pending) == ("paused", True)
    rt.shutdown()
