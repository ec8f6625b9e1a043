"""The ClusterSeat keeps the inactivity deadlines its sessions report in memory and the
heartbeat stores only those that changed, in one statement (issue 20, item 4): a session
re-arms its deadline at every event, the database hears of it once per heartbeat at most.
And without the cluster mode nothing of it exists: no lease is ever read or written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from corvid_actors.actors.cluster import ClusterSeat
from corvid_actors.clock import RealClock
from corvid_actors.config import Config
from corvid_actors.db.cluster import ClusterStore
from corvid_actors.testing import ScriptedProvider, SimClock, sim_runtime

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def recording(monkeypatch: pytest.MonkeyPatch, db: Any) -> list[str]:
    """Every statement ``db`` runs from now on (the SQL text)."""
    statements: list[str] = []
    execute = db.execute_sql

    def record(sql: str, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, *args, **kwargs)

    monkeypatch.setattr(db, "execute_sql", record)
    return statements


@pytest.mark.postgres
def test_the_flush_writes_only_the_deadlines_that_changed_in_one_statement(pg_url, open_store, monkeypatch):
    store = open_store(pg_url)
    cfg = Config().replace(cluster={"enabled": True, "daemon_id": "a"}).cluster
    seat = ClusterSeat(ClusterStore(store), store, "a", cfg, RealClock())
    seat.register()
    sids = [store.create_session(name=f"s{i}").id for i in range(4)]
    for sid in sids:
        seat.claim(sid)
    lease_of = {sid: lambda sid=sid: seat.cluster.owner_of(sid).inactivity_due_at for sid in sids}

    for second in range(100):  # a session re-arms its deadline often: only the latest counts
        seat.note_deadline(sids[0], at(second))
    seat.note_deadline(sids[1], at(1800))
    seat.note_deadline(sids[2], None)  # mid-turn: written once (a lease may keep an old owner's)
    statements = recording(monkeypatch, store.db)
    assert seat.flush_deadlines() == 3
    assert len(statements) == 1
    assert [lease_of[sid]() for sid in sids] == [at(99), at(1800), None, None]

    statements.clear()
    assert seat.flush_deadlines() == 0  # nothing reported: no statement at all
    seat.note_deadline(sids[0], None)  # a turn started ...
    seat.note_deadline(sids[0], at(99))  # ... and ended within one heartbeat, same deadline
    seat.note_deadline(sids[1], at(1800))  # reported again, unchanged
    seat.note_deadline(sids[2], None)
    assert seat.flush_deadlines() == 0 and statements == []

    seat.note_deadline(sids[1], None)  # a turn runs: the stored deadline no longer holds
    seat.note_deadline(sids[3], at(60))
    assert seat.flush_deadlines() == 2 and len(statements) == 1
    assert [lease_of[sid]() for sid in sids] == [at(99), None, None, at(60)]

    statements.clear()  # the idle exit's deadline (issue 36) rides in the same statement
    seat.note_deadline(sids[0], at(99), at(40))
    seat.note_deadline(sids[3], at(60), at(45))
    assert seat.flush_deadlines() == 2 and len(statements) == 1
    idle = {lease.session_id: lease.idle_due_at for lease in seat.cluster.leases(sids)}
    assert [idle[sid] for sid in sids] == [at(40), None, None, at(45)]

    seat.finish(sids[3])  # the lease's end clears its deadline; a late report is not written
    seat.note_deadline(sids[3], at(61))
    statements.clear()
    assert seat.flush_deadlines() == 0 and statements == []
    assert lease_of[sids[3]]() is None


def test_without_the_cluster_mode_no_lease_is_read_or_written(tmp_path, open_store, monkeypatch):
    # one daemon on SQLite: a session's start, turns, extension, idle time and timeout
    clock = SimClock()
    store = open_store(f"sqlite:///{tmp_path / 'corvid.db'}")
    runtime = sim_runtime(clock, ScriptedProvider(clock), store=store,
                          config={"supervisor": {"session_timeout_s": 120.0}})
    try:
        statements = recording(monkeypatch, store.db)
        sid = runtime.create_session(source="web").id
        runtime.start_process(sid, "hi")
        clock.advance(10)
        assert runtime.send_message(sid, "again")
        clock.advance(10)
        assert runtime.extend_timeout(sid, 200)
        clock.advance(300)
        assert not runtime.is_running(sid)  # timed out
        assert statements and not [sql for sql in statements if "session_leases" in sql]
    finally:
        runtime.shutdown()
        clock.close()
