"""Fault hooks and the supervisor half of shutdown, through ``corvid_actors.testing`` and
``Runtime`` only: an incarnation killed as a crash, and post-shutdown state read back."""

from __future__ import annotations

import pytest

from corvid_actors.db.store import Store
from corvid_actors.errors import RuntimeStoppedError
from corvid_actors.testing import EventRecorder, Turn, kill_incarnation, sim_runtime


def test_kill_incarnation_is_a_crash_and_restarts_after_the_backoff(runtime, scripted, recorder):
    s = runtime.create_session(source="chat")  # chat sessions auto-restart
    # the first turn is still in flight (simulated latency) when the actor is killed
    scripted.for_session(s.id, Turn.reply("never seen", latency_s=60), Turn.reply("after the restart"))
    runtime.start_process(s.id, "hello")
    runtime.settle()
    assert runtime.is_running(s.id)
    killed_at = runtime.clock.monotonic()
    assert kill_incarnation(runtime, s.id) is True
    runtime.settle()
    assert not runtime.is_running(s.id)
    exited = recorder.last("session_exited", s.id)
    assert exited is not None and exited.code == 1
    crash = [r.event for r in recorder.of(s.id, "session_error") if r.event.error_type == "crash"]
    assert len(crash) == 1 and "InjectedCrashError" in crash[0].message
    restarting = recorder.last("session_restarting", s.id)
    assert restarting is not None and restarting.attempt == 1
    notes = [m.content for m in runtime.internals.store.messages(s.id) if m.role == "system"]
    assert len(notes) == 1 and notes[0].startswith("Session exited unexpectedly (code 1)")
    assert runtime.internals.store.get_session(s.id).status == "error"
    # the restart comes after the backoff delay, not before
    runtime.clock.advance(restarting.delay_s - 0.001)
    runtime.settle()
    assert not runtime.is_running(s.id)
    runtime.clock.advance(0.001)
    runtime.settle()
    assert runtime.is_running(s.id)
    recorder.assert_first_at("session_started", killed_at + restarting.delay_s, s.id, after=killed_at)
    assert [r.event.generation for r in recorder.of(s.id, "session_started")] == [1, 2]
    # the killed turn's reply never reached the store
    assert "never seen" not in [m.content for m in runtime.internals.store.messages(s.id)]


def test_kill_incarnation_of_a_web_session_crashes_without_restart(runtime, recorder):
    s = runtime.create_session(source="web")  # web sessions do not auto-restart
    runtime.start_process(s.id, "hello")
    runtime.settle()
    assert kill_incarnation(runtime, s.id) is True
    runtime.settle()
    runtime.clock.advance(3600)
    runtime.settle()
    assert not runtime.is_running(s.id)
    assert recorder.last("session_exited", s.id).code == 1
    assert recorder.of(s.id, "session_restarting") == []
    assert recorder.times("session_started", s.id) == [0.0]


def test_kill_incarnation_of_a_session_that_is_not_running_is_false(runtime):
    s = runtime.create_session(source="chat")
    assert kill_incarnation(runtime, s.id) is False
    assert kill_incarnation(runtime, "no-such-session") is False


# --- Runtime.stop_sessions -------------------------------------------------------------------------


def _scenario(runtime):
    """Two running sessions, one crashed and waiting for its restart, one never started."""
    running = [runtime.create_session(source="web"), runtime.create_session(source="chat")]
    crashed, idle = runtime.create_session(source="chat"), runtime.create_session(source="web")
    for s in (*running, crashed):
        runtime.start_process(s.id, f"hello {s.id}")
    runtime.settle()
    kill_incarnation(runtime, crashed.id)
    runtime.settle()
    return running, crashed, idle


def _rows(store, sessions):
    return [(r.status, r.pid, bool(r.restart_pending)) for r in (store.get_session(s.id) for s in sessions)]


def test_stop_sessions_stops_and_marks_for_resume_and_reads_keep_working(runtime, recorder):
    running, crashed, idle = _scenario(runtime)
    runtime.stop_sessions()
    # the store still answers, and says what shutdown leaves behind
    assert _rows(runtime.internals.store, running) == [("stopped", None, True)] * 2
    assert _rows(runtime.internals.store, [crashed]) == [("error", None, True)]
    assert _rows(runtime.internals.store, [idle]) == [("idle", None, False)]
    assert [m.content for m in runtime.internals.store.messages(running[0].id)][0] == f"hello {running[0].id}"
    # the event bus still delivered the stop events, and the runtime still reads
    assert [recorder.last("session_stopped", s.id).reason for s in running] == ["server_shutdown"] * 2
    assert recorder.of(crashed.id, "session_stopped") == []
    assert runtime.get_active_session_ids() == []
    assert not runtime.is_running(running[0].id)
    assert runtime.approval_mode() == "normal"
    # no session starts any more; the restart that was due never comes
    with pytest.raises(RuntimeStoppedError):
        runtime.start_process(idle.id, "too late")
    with pytest.raises(RuntimeStoppedError):
        runtime.resume_process(running[0].id)
    assert runtime.send_message(running[0].id, "anyone?") is False
    runtime.clock.advance(3600)
    runtime.settle()
    assert runtime.get_active_session_ids() == []
    assert len(recorder.of(crashed.id, "session_started")) == 1
    # shutdown afterwards still works, and then the runtime is stopped
    runtime.shutdown()
    with pytest.raises(RuntimeStoppedError):
        runtime.is_running(running[0].id)
    with pytest.raises(RuntimeStoppedError):
        runtime.stop_sessions()


def test_stop_sessions_leaves_the_rows_and_events_shutdown_leaves(sim_clock, scripted, tmp_path):
    outcomes = []
    for how in ("stop_sessions", "shutdown"):
        rt = sim_runtime(sim_clock, scripted, store_url=f"sqlite:///{tmp_path}/{how}.db",
                         workspace_dir=tmp_path / "workspace")
        recorder = EventRecorder.attach(rt)
        sessions = _scenario(rt)
        if how == "stop_sessions":
            rt.stop_sessions("maintenance")
        else:
            rt.shutdown("maintenance")
        running, crashed, idle = sessions
        # after shutdown the runtime's own store is closed: read the file as the next start-up would
        store = rt.internals.store if how == "stop_sessions" else Store(f"sqlite:///{tmp_path}/{how}.db")
        outcomes.append((_rows(store, [*running, crashed, idle]),
                         [[(r.type, getattr(r.event, "reason", None)) for r in recorder.of(s.id)][-1]
                          for s in running]))
        if how == "stop_sessions":
            rt.shutdown()
        else:
            store.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] == [("session_stopped", "maintenance")] * 2
