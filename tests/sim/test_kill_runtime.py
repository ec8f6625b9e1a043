"""``testing.faults.kill_runtime``: the daemon dies as on ``kill -9`` — nothing written or
published on the way down — and a second runtime over the same store recovers its sessions
(process-manager seed: "Stale session cleanup on startup: all sessions with status
``running`` are reset to ``idle`` with ``pid = NULL``")."""

from __future__ import annotations

import pytest

from corvid_actors.errors import RuntimeStoppedError
from corvid_actors.testing import EventRecorder, Turn, kill_runtime, sim_runtime


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'corvid.db'}"


def test_a_runtime_killed_mid_turn_leaves_a_running_row_the_next_one_resets_and_answers(sim_clock, scripted, url):
    first = sim_runtime(sim_clock, scripted, store_url=url)
    recorder = EventRecorder.attach(first)
    session = first.create_session(source="web")
    # the first call takes the first turn and is killed before its 30 s pass; the resume
    # after the restart calls the model again: it takes the second
    scripted.for_session(session.id, Turn.reply("never heard", latency_s=30), Turn.reply("answered after the restart"))
    pid = first.start_process(session.id, "what is 2+2?")
    sim_clock.advance(10)
    seen_before = len(recorder.events)

    kill_runtime(first)

    assert len(recorder.events) == seen_before  # nothing published on the way down
    assert "killed" in first.failure
    with pytest.raises(RuntimeStoppedError, match="killed"):
        first.start_process(session.id, "anyone?")
    first.shutdown()  # does nothing: it is already dead
    sim_clock.advance(60)  # the dead runtime's timers (the 30 s call, the timeout) never fire
    assert recorder.of(session.id, "assistant") == []

    second = sim_runtime(sim_clock, scripted, store_url=url)
    try:
        assert second.stale_session_ids == [session.id]
        row = second.session(session.id)
        assert (row.status, row.pid, row.restart_pending) == ("idle", None, True)
        assert [m.role for m in second.history(session.id)] == ["user"]  # no exit note, no stop
        later = EventRecorder.attach(second)
        assert second.resume_pending_sessions() == [session.id]
        second.settle()
        assert later.last("assistant", session.id).content == "answered after the restart"
        assert scripted.remaining(session.id) == 0  # the killed turn cost one scripted turn
        assert [r.at for r in scripted.requests_for(session.id)] == [0.0, 70.0]
        assert pid is not None
    finally:
        second.shutdown()


def test_a_killed_runtime_writes_no_stop_where_a_shutdown_does(sim_clock, scripted, url):
    killed = sim_runtime(sim_clock, scripted, store_url=url)
    running, idle = killed.create_session(source="chat"), killed.create_session(source="web")
    killed.start_process(running.id, "hello")
    killed.settle()
    kill_runtime(killed)

    second = sim_runtime(sim_clock, scripted, store_url=url)
    try:
        assert second.stale_session_ids == [running.id]  # the idle one was never running
        assert [m.role for m in second.history(running.id)] == ["user", "assistant"]
        assert second.session(idle.id).restart_pending is False
    finally:
        second.shutdown()


def test_a_killed_runtime_over_a_shared_store_object_leaves_it_open_for_the_next(sim_clock, scripted, tmp_path):
    from corvid_actors.db.store import Store

    store = Store(f"sqlite:///{tmp_path / 'shared.db'}")
    try:
        first = sim_runtime(sim_clock, scripted, store=store)
        session = first.create_session(source="web")
        first.start_process(session.id, "hi")
        first.settle()
        kill_runtime(first)
        assert store.get_session(session.id).status == "running"  # the store is open and unchanged
        second = sim_runtime(sim_clock, scripted, store=store)
        try:
            assert second.stale_session_ids == [session.id]
            second.resume_pending_sessions()
            second.settle()
            assert second.is_running(session.id)
        finally:
            second.shutdown()
    finally:
        store.close()


@pytest.mark.parametrize("dispatcher", ["inline", "threads"])
def test_kill_runtime_under_either_dispatcher(sim_clock, scripted, url, dispatcher):
    first = sim_runtime(sim_clock, scripted, store_url=url, dispatcher=dispatcher)
    session = first.create_session(source="chat")
    scripted.for_session(session.id, Turn.reply("slow", latency_s=30))
    first.start_process(session.id, "hi")
    first.settle()
    kill_runtime(first)
    kill_runtime(first)  # twice: nothing more happens
    second = sim_runtime(sim_clock, scripted, store_url=url, dispatcher=dispatcher)
    try:
        assert second.stale_session_ids == [session.id]
    finally:
        second.shutdown()


def test_an_incarnation_killed_mid_turn_also_costs_its_script_two_turns(runtime, scripted, recorder):
    from corvid_actors.testing import kill_incarnation

    session = runtime.create_session(source="chat")
    scripted.for_session(session.id, Turn.reply("never heard", latency_s=30), "answered after the restart")
    runtime.start_process(session.id, "hello")
    runtime.clock.advance(10)
    assert kill_incarnation(runtime, session.id)
    runtime.clock.advance(10)  # the restart after 5 s resumes the open turn
    assert recorder.last("assistant", session.id).content == "answered after the restart"
    assert scripted.remaining(session.id) == 0
    assert [(r.at, r.generation) for r in scripted.requests_for(session.id)] == [(0.0, 1), (15.0, 2)]
