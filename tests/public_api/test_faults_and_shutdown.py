"""Fault hooks and the supervisor half of shutdown, through ``corvid_actors.testing`` and
``Runtime`` only: an incarnation killed as a crash, and post-shutdown state read back."""

from __future__ import annotations

from corvid_actors.testing import Turn, kill_incarnation


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
    notes = [m.content for m in runtime.store.messages(s.id) if m.role == "system"]
    assert len(notes) == 1 and notes[0].startswith("Session exited unexpectedly (code 1)")
    assert runtime.store.get_session(s.id).status == "error"
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
    assert "never seen" not in [m.content for m in runtime.store.messages(s.id)]


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
