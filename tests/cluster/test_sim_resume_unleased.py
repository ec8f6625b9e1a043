"""Sessions a run without leases left to resume are resumed when the cluster mode starts
(issue 20): a one-daemon runtime on the PostgreSQL store stops (its sessions marked for
resume) or crashes (rows left ``running``); then two cluster-mode runtimes start on that
database. Every such session is resumed by exactly one of them — a turn only for the one
that was mid-turn — and a session nobody marked stays idle. Simulated time throughout."""

from __future__ import annotations

import pytest

from corvid_actors.db.cluster import ClusterStore
from corvid_actors.testing import EventRecorder, ScriptedProvider, SimClock, Turn, sim_runtime

pytestmark = pytest.mark.postgres

CLUSTER = {"enabled": True, "heartbeat_s": 5.0, "lease_s": 15.0, "sweep_interval_s": 5.0,
           "sweep_jitter_s": 1.0, "dead_daemon_grace_s": 60.0}


def test_sessions_marked_by_a_run_without_leases_are_resumed_once_in_cluster_mode(pg_url, open_store):
    clock = SimClock()
    single_model = ScriptedProvider(clock)
    store = open_store(pg_url)
    single = sim_runtime(clock, single_model, store=store)
    try:
        waiting = single.create_session(source="web").id  # answered, then stopped by shutdown
        crashed = single.create_session(source="web").id  # mid-turn when its daemon died
        untouched = single.create_session(source="web").id  # never marked
        single_model.for_session(waiting, Turn.reply("first answer"))
        single.start_process(waiting, "hello")
        clock.advance(1)
        single.stop_sessions()
        store.append_message(crashed, "user", "are you there?")
        store.update_session(crashed, status="running", pid=3, open_turns=1)
    finally:
        single.shutdown()

    runtimes, models, events = [], [], []
    try:
        for name in ("a", "b"):
            model = ScriptedProvider(clock, default_reply=f"reply from {name}")
            runtime = sim_runtime(clock, model, store_url=pg_url, config={"cluster": {**CLUSTER, "daemon_id": name}})
            runtimes.append(runtime)
            models.append(model)
            events.append(EventRecorder.attach(runtime))
        a, b = runtimes
        resumed = [a.resume_pending_sessions(), b.resume_pending_sessions()]
        clock.advance(1)

        assert sorted(resumed[0] + resumed[1]) == sorted([waiting, crashed])
        assert set(resumed[0]).isdisjoint(resumed[1])
        for sid in (waiting, crashed):
            owner = 0 if sid in resumed[0] else 1
            assert runtimes[owner].is_running(sid) and not runtimes[1 - owner].is_running(sid)
            assert len(events[owner].times("session_started", sid)) == 1
            assert events[1 - owner].times("session_started", sid) == []
        # a turn only for the session that was mid-turn; none for the one waiting for its user
        assert sorted(r.session_id for model in models for r in model.requests) == [crashed]
        assert not any(rt.is_running(untouched) for rt in runtimes)
        cluster = ClusterStore(store)
        assert {cluster.owner_of(sid).owner_id for sid in (waiting, crashed)} <= {"a", "b"}
        assert cluster.owner_of(untouched) is None
        assert not any(store.get_session(sid).restart_pending for sid in (waiting, crashed, untouched))
        clock.advance(60)  # heartbeats and sweeps: nothing moves, nothing resumes twice
        assert sum(len(e.times("session_started")) for e in events) == 2
    finally:
        for runtime in runtimes:
            runtime.shutdown()
        clock.close()


def test_a_one_daemon_runtime_still_resumes_its_marked_sessions(tmp_path, open_store):
    # no cluster mode: the marks are taken as before, and no lease row is written
    clock = SimClock()
    model = ScriptedProvider(clock)
    store = open_store(f"sqlite:///{tmp_path / 'corvid.db'}")
    runtime = sim_runtime(clock, model, store=store)
    try:
        sid = runtime.create_session(source="web").id
        store.mark_for_resume([sid], stopped=True)
        assert runtime.resume_pending_sessions() == [sid]
        clock.advance(1)
        assert runtime.is_running(sid)
        assert store.m.SessionLease.select().count() == 0
    finally:
        runtime.shutdown()
        clock.close()


def test_the_orphan_pruner_leaves_the_rows_of_another_daemons_sessions_alone(pg_url, open_store):
    # b's session runs; a's orphan pruner (every 300 s) must not take its row for a ghost
    # and mark it for resume: once stopped, the next daemon to start would resume it
    clock = SimClock()
    store = open_store(pg_url)
    runtimes = [sim_runtime(clock, ScriptedProvider(clock), store_url=pg_url,
                            config={"cluster": {**CLUSTER, "daemon_id": name}}) for name in ("a", "b")]
    a, b = runtimes
    try:
        sid = b.create_session(source="web").id
        b.start_process(sid, "hi")
        a.start_process(a.create_session(source="web").id, "a session of a's own")
        clock.advance(301)
        row = store.get_session(sid)
        assert b.is_running(sid) and (row.status, row.restart_pending) == ("running", False)
        b.stop_process(sid)
        clock.advance(1)
        late = sim_runtime(clock, ScriptedProvider(clock), store_url=pg_url,
                           config={"cluster": {**CLUSTER, "daemon_id": "late"}})
        runtimes.append(late)
        assert late.resume_pending_sessions() == []
    finally:
        for runtime in runtimes:
            runtime.shutdown()
        clock.close()
