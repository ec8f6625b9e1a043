"""Where each session ran (issue 36 item 8; corvid_actors/db/ownership.py): the rows the
lease changes write, in their transactions, on PostgreSQL; and the retention bound. Times
are given, as a daemon's Clock would give them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.store import Store

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE_S = 15.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rows(cluster: ClusterStore, sid: str) -> list[tuple[object, ...]]:
    return [(o.daemon_id, o.epoch, o.since, o.until, o.reason_in, o.reason_out) for o in cluster.ownership(sid)]


@pytest.fixture
def daemons(pg_url: str, open_store: Callable[[str], Store]) -> Callable[..., list[ClusterStore]]:
    def make(*ids: str, history_max: int = 50) -> list[ClusterStore]:
        out = []
        for daemon_id in ids:
            cluster = ClusterStore(open_store(pg_url), history_max=history_max)
            cluster.register_daemon(daemon_id, "h", 1, "test", T0)
            out.append(cluster)
        return out

    return make


def test_a_start_a_failover_a_drain_and_a_stop_each_leave_their_row(daemons) -> None:
    a, b, c = daemons("a", "b", "c")
    sid = a.store.create_session(name="s").id
    assert a.claim([sid], "a", at(0), LEASE_S) == [(sid, 1)]
    # a stops renewing; b's sweep takes the expired lease at 20 s
    assert [x.session_id for x in b.claim_expired("b", at(20), LEASE_S, 2, 100)] == [sid]
    assert b.release("b", [sid], now=at(30), reason="drain") == 1
    assert [x.session_id for x in c.claim_expired("c", at(31), LEASE_S, 2, 100)] == [sid]
    assert c.finish("c", [sid], now=at(40)) == 1
    assert rows(c, sid) == [
        ("a", 1, at(0), at(20), "start", "failover"),
        ("b", 2, at(20), at(30), "failover", "drain"),
        ("c", 3, at(31), at(40), "drain", "stop"),
    ]
    assert c.claim([sid], "c", at(50), LEASE_S) == [(sid, 4)]
    assert rows(c, sid)[-1] == ("c", 4, at(50), None, "start", None)


def test_a_daemon_registering_again_lets_its_earlier_lifes_sessions_go_as_a_failover(daemons) -> None:
    a, b = daemons("a", "b")
    sid = a.store.create_session(name="s").id
    a.claim([sid], "a", at(0), LEASE_S)
    assert a.register_daemon("a", "h", 2, "test", at(5)) == [sid]  # restarted under its id
    b.claim_expired("b", at(6), LEASE_S, 2, 100)
    assert rows(b, sid) == [("a", 1, at(0), at(5), "start", "failover"), ("b", 2, at(6), None, "failover", None)]


def test_shutdown_closes_every_open_row_of_the_daemon_and_none_of_the_others(daemons) -> None:
    a, b = daemons("a", "b")
    mine = [a.store.create_session(name=f"a{i}").id for i in range(3)]
    theirs = b.store.create_session(name="b").id
    a.claim(mine, "a", at(0), LEASE_S)
    b.claim([theirs], "b", at(0), LEASE_S)
    assert a.release("a", now=at(9), reason="shutdown") == 3
    assert {rows(a, sid)[-1][3:] for sid in mine} == {(at(9), "start", "shutdown")}
    assert rows(a, theirs) == [("b", 1, at(0), None, "start", None)]


def test_each_session_keeps_its_last_rows_only(daemons) -> None:
    a, b = daemons("a", "b", history_max=4)
    sid, other = (a.store.create_session(name=n).id for n in ("busy", "quiet"))
    a.claim([other], "a", at(0), LEASE_S)
    for step in range(10):  # ten incarnations, alternately on a and b
        cluster, name = (a, "a") if step % 2 == 0 else (b, "b")
        cluster.claim([sid], name, at(10 * step), LEASE_S)
        cluster.finish(name, [sid], now=at(10 * step + 5))
    history = rows(a, sid)
    assert [(d, e) for d, e, *_ in history] == [("a", 7), ("b", 8), ("a", 9), ("b", 10)]
    assert history[-1] == ("b", 10, at(90), at(95), "start", "stop")
    assert rows(a, other) == [("a", 1, at(0), None, "start", None)]  # another session's rows are its own


def test_no_history_is_written_when_the_bound_is_zero(daemons) -> None:
    a, = daemons("a", history_max=0)
    sid = a.store.create_session(name="s").id
    a.claim([sid], "a", at(0), LEASE_S)
    a.finish("a", [sid], now=at(1))
    assert a.ownership(sid) == []
