"""The cluster schema on SQLite (one daemon: the migration applies, nothing is ever fenced)
and the fair-share rule of the failover sweep. PostgreSQL: test_cluster_pg.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corvid_actors.db.cluster import ClusterStore, Deadline, fair_share
from corvid_actors.db.ledger import Ledger
from corvid_actors.db.migrations import MIGRATIONS
from corvid_actors.db.store import Store

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE_S = 15.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(("expired", "live", "max_sessions", "owned", "share"), [
    (10, 2, 100, 0, 6),     # ceil(10 / 2) + 1
    (10, 3, 100, 0, 5),     # ceil(10 / 3) + 1
    (1, 5, 100, 0, 1),      # never more than there are
    (0, 2, 100, 0, 0),
    (10, 1, 100, 0, 10),
    (10, 2, 8, 5, 3),       # bounded by max_sessions - owned
    (10, 2, 8, 8, 0),
    (10, 2, 8, 9, 0),       # already over the bound: nothing, never negative
    (10, 0, 100, 0, 10),    # no live daemon counted: the sweeper itself is one
])
def test_fair_share(expired: int, live: int, max_sessions: int, owned: int, share: int) -> None:
    assert fair_share(expired, live, max_sessions, owned) == share


@pytest.fixture(params=["sqlite-memory", "sqlite-file"])
def sqlite_store(request: pytest.FixtureRequest, open_store, tmp_path) -> Store:
    return open_store("sqlite:///:memory:" if request.param == "sqlite-memory"
                      else f"sqlite:///{tmp_path / 'corvid.db'}")


def test_the_migration_applies_on_sqlite(sqlite_store: Store) -> None:
    assert sqlite_store.schema_version == len(MIGRATIONS)
    assert {"daemons", "session_leases"} <= set(sqlite_store.db.get_tables())
    for table in ("sessions", "session_messages", "credit_transactions"):
        assert "writer_epoch" in {c.name for c in sqlite_store.db.get_columns(table)}
    lease_columns = {c.name for c in sqlite_store.db.get_columns("session_leases")}
    assert {"owner_id", "lease_expires_at", "epoch", "restart_due_at", "resume_due_at",
            "inactivity_due_at"} <= lease_columns


def test_a_version_5_sqlite_database_is_migrated(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    sid = old.create_session(name="from before").id
    old.db.execute_sql("DROP TABLE session_leases")
    old.db.execute_sql("DROP TABLE daemons")
    for table in ("sessions", "session_messages", "credit_transactions"):
        old.db.execute_sql(f'ALTER TABLE "{table}" DROP COLUMN writer_epoch')
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 6).execute()
    old.close()

    store = Store(url)
    try:
        assert store.schema_version == len(MIGRATIONS)
        cluster = ClusterStore(store)
        cluster.register_daemon("only", "h", 1, "test", T0)
        assert cluster.claim([sid], "only", T0, LEASE_S) == [(sid, 1)]
    finally:
        store.close()


def test_fencing_never_refuses_on_sqlite(sqlite_store: Store) -> None:
    cluster = ClusterStore(sqlite_store)
    cluster.register_daemon("only", "h", 1, "test", T0)
    sid = sqlite_store.create_session(name="s").id
    cluster.claim([sid], "only", at(0), LEASE_S)
    cluster.claim([sid], "only", at(1), LEASE_S)
    cluster.claim([sid], "only", at(2), LEASE_S)  # epoch 3: writes below carry 1

    M, S = sqlite_store.m.SessionMessage, sqlite_store.m.Session
    with sqlite_store.transaction():
        M.insert(session=sid, role="assistant", content="old epoch", writer_epoch=1).execute()
    sqlite_store.update_session(sid, status="running", writer_epoch=1)
    with sqlite_store.transaction():
        S.update(total_cost_usd=S.total_cost_usd + 1.0, writer_epoch=1).where(S.id == sid).execute()
    ledger = Ledger(sqlite_store)
    ledger.open_account("alice", 10)
    with sqlite_store.transaction():
        sqlite_store.m.CreditTransaction.insert(participant="alice", type="deduction", amount=-1, balance_after=9,
                                                session_id=sid, writer_epoch=1).execute()

    assert sqlite_store.count_messages(sid) == 1
    assert (sqlite_store.get_session(sid).status, sqlite_store.get_session(sid).total_cost_usd) == ("running", 1.0)
    assert ledger.count_transactions("alice", "deduction") == 1


def test_one_daemon_runs_the_cluster_operations_on_sqlite(sqlite_store: Store) -> None:
    cluster = ClusterStore(sqlite_store)
    assert cluster.register_daemon("only", "h", 1, "test", T0) == []
    sids = [sqlite_store.create_session(name=f"s{i}").id for i in range(3)]

    assert [c.epoch for c in cluster.claim(sids, "only", at(0), LEASE_S)] == [1, 1, 1]
    assert cluster.heartbeat("only", at(5), LEASE_S) == 3
    assert cluster.owner_of(sids[0]).lease_expires_at == at(5 + LEASE_S)
    assert cluster.owned_by("only") == sorted(sids)
    assert cluster.release("only", sids[:1], now=at(5)) == 1
    assert [c.session_id for c in cluster.claim_expired("only", at(6), LEASE_S, 1, 10)] == sids[:1]
    assert cluster.finish("only", sids[1:2], now=at(6)) == 1
    assert cluster.place_new_session(at(6), 30.0) == "only"
    assert cluster.expire_dead_daemons(at(100), 60.0, sparing="only") == []  # it sweeps: alive
    assert cluster.expire_dead_daemons(at(100), 60.0) == ["only"]
    assert cluster.live_daemons(at(100), 60.0) == []


def test_one_daemon_claims_the_sessions_left_to_resume_on_sqlite(sqlite_store: Store) -> None:
    cluster = ClusterStore(sqlite_store)
    cluster.register_daemon("only", "h", 1, "test", T0)
    marked, stale, plain = (sqlite_store.create_session(name=f"s{i}").id for i in range(3))
    sqlite_store.mark_for_resume([marked], stopped=True)
    sqlite_store.update_session(stale, status="running", pid=4)

    claims = cluster.claim_unleased_resumes("only", at(0), LEASE_S)
    assert sorted(claims) == sorted([(marked, 1), (stale, 1)])
    assert [sqlite_store.get_session(s).restart_pending for s in (marked, stale, plain)] == [False] * 3
    assert (sqlite_store.get_session(stale).status, sqlite_store.get_session(stale).pid) == ("idle", None)
    assert cluster.claim_unleased_resumes("only", at(1), LEASE_S) == []


def test_one_daemon_stores_inactivity_deadlines_on_sqlite(sqlite_store: Store) -> None:
    cluster = ClusterStore(sqlite_store)
    cluster.register_daemon("only", "h", 1, "test", T0)
    sids = [sqlite_store.create_session(name=f"s{i}").id for i in range(2)]
    epochs = dict(cluster.claim(sids, "only", at(0), LEASE_S))
    assert cluster.set_inactivity_deadlines("only", [Deadline(sids[0], epochs[sids[0]], at(1800)),
                                                     Deadline(sids[1], epochs[sids[1]] + 1, at(5))]) == 1
    assert [lease.inactivity_due_at for lease in cluster.leases(sids)] == [
        at(1800) if lease.session_id == sids[0] else None for lease in cluster.leases(sids)]
