"""A failover sweep reads the leases that are held, not every session the cluster ever ran.

A lease row stays when its session ends (owner and expiry cleared, so the next claim's
epoch is higher still): a cluster that served a million sessions keeps a million rows.
Every daemon sweeps every ``sweep_interval_s`` (5 s): counting the expired leases read
all of them (a sequential scan: ~105 ms a sweep at a million rows on PostgreSQL here).
The work of a sweep is measured in the database's own units: rows of ``session_leases``
read (PostgreSQL's ``pg_stat_xact_user_tables`` for the sweep's transaction), virtual
machine steps (SQLite). And the heartbeat, which renews every lease a daemon holds every
5 s, must stay a heap-only (HOT) update on PostgreSQL: no index may cover the expiry it
rewrites.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.store import Store
from tests.db.db_work import work

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE_S = 15.0
FEW, MANY = 200, 5_000


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _ended_leases(store: Store, n: int, prefix: str) -> None:
    """``n`` sessions that ran and ended: their lease rows kept, no owner, no expiry (bulk)."""
    S, L = store.m.Session, store.m.SessionLease
    data = dict(store.create_session(name=f"{prefix}-template").__data__)
    ids = [f"{prefix}-{i}" for i in range(n)]
    with store.transaction():
        for start in range(0, n, 500):
            chunk = ids[start:start + 500]
            S.insert_many([{**data, "id": sid} for sid in chunk]).execute()
            L.insert_many([{"session": sid, "epoch": 3} for sid in chunk]).execute()


def test_a_sweep_reads_held_leases_not_every_ended_one(store: Store) -> None:
    cluster = ClusterStore(store)
    cluster.register_daemon("sweeper", "host", 1, "test", T0)
    done = {}
    for round_, (prefix, n) in enumerate((("few", FEW), ("many", MANY - FEW))):
        _ended_leases(store, n, prefix)
        dead = f"dead-{prefix}"
        cluster.register_daemon(dead, "host", 2, "test", at(100 * round_))
        held = [store.create_session(name=f"{prefix}-held-{i}").id for i in range(3)]
        assert len(cluster.claim(held, dead, at(100 * round_), LEASE_S)) == 3
        sweep_at = at(100 * round_ + 20)
        cluster.heartbeat("sweeper", sweep_at, LEASE_S)
        claims, done[prefix] = work(store, "session_leases",
                                    lambda t=sweep_at: cluster.claim_expired("sweeper", t, LEASE_S, 1, 1000))
        assert len(claims) == 3  # the dead daemon's three, nothing of the ended sessions
    assert done["many"] <= 2 * done["few"] + 20, done


@pytest.mark.postgres
def test_a_heartbeat_renews_every_lease_in_place(pg_url: str, open_store) -> None:
    store = open_store(pg_url)
    cluster = ClusterStore(store)
    cluster.register_daemon("d", "host", 1, "test", T0)
    _ended_leases(store, 500, "ended")
    sids = [store.create_session(name=f"s{i}").id for i in range(50)]
    cluster.claim(sids, "d", T0, LEASE_S)
    counts = ("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
              "WHERE relname = 'session_leases' AND schemaname = current_schema()")
    with store.transaction():  # the backend's counts not yet reported, this transaction's included
        [[updated_before, hot_before]] = store.db.execute_sql(counts).fetchall()
        assert cluster.heartbeat("d", at(5), LEASE_S) == 50
        [[updated_after, hot_after]] = store.db.execute_sql(counts).fetchall()
    updated, hot = updated_after - updated_before, hot_after - hot_before
    assert updated == 50
    # HOT needs room in the page too (fillfactor 50; pruning makes more as pages fill): most,
    # not all, are heap-only here. An index on the expiry makes none of them.
    assert hot >= 40, (updated, hot)
