"""Several daemons on one PostgreSQL (issue 20): claims, epochs, fencing, heartbeats, sweeps.

Every daemon is a :class:`ClusterStore` on its own :class:`Store` (its own connection) in
one fresh schema (``pg_url``, tests/db/conftest.py). Times are given, as a daemon's Clock
would give them; nothing here waits for a lease to expire.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import peewee as pw
import psycopg2
import pytest

from corvid_actors.db.cluster import ClusterStore, Deadline
from corvid_actors.db.fencing import TRIGGER_NAME
from corvid_actors.db.ledger import Ledger
from corvid_actors.db.models import DaemonState
from corvid_actors.db.store import Store
from corvid_actors.errors import FencedWrite
from tests.db.conftest import JOIN_TIMEOUT_S, run_together

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE_S = 15.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def daemons(pg_url: str, open_store: Callable[[str], Store]) -> Callable[..., list[ClusterStore]]:
    """``daemons("a", "b")``: one registered daemon per id, each on its own connection."""

    def make(*ids: str) -> list[ClusterStore]:
        out = []
        for daemon_id in ids:
            cluster = ClusterStore(open_store(pg_url))
            cluster.register_daemon(daemon_id, "host-" + daemon_id, 1000 + len(out), "test", T0)
            out.append(cluster)
        return out

    return make


def new_sessions(cluster: ClusterStore, count: int) -> list[str]:
    return [cluster.store.create_session(name=f"s{i}").id for i in range(count)]


def insert_message(store: Store, session_id: str, epoch: int | None, content: str = "hi") -> None:
    M = store.m.SessionMessage
    with store.transaction():
        M.insert(session=session_id, role="assistant", content=content, writer_epoch=epoch).execute()


def counted_statements(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[str]:
    """The SQL ``store`` executes from now on (the list fills as it runs)."""
    statements: list[str] = []
    execute = store.db.execute_sql

    def counting(sql: str, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, *args, **kwargs)

    monkeypatch.setattr(store.db, "execute_sql", counting)
    return statements


# --- claims ---------------------------------------------------------------------------------


def test_concurrent_claims_never_overlap_and_count_every_epoch(daemons) -> None:
    # 3 daemons x 4 connections each, all claiming random overlapping sets of 120 sessions.
    a, b, c = daemons("a", "b", "c")
    sids = new_sessions(a, 120)
    workers = [ClusterStore(Store(cluster.store.url)) for cluster in (a, b, c) for _ in range(4)]
    owners = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    got: list[list[tuple[str, str, int]]] = [[] for _ in workers]

    def claimer(k: int) -> Callable[[], None]:
        def run() -> None:
            rnd = random.Random(k)
            for _ in range(15):
                chosen = rnd.sample(sids, 30)
                got[k] += [(owners[k], sid, epoch) for sid, epoch in
                           workers[k].claim(chosen, owners[k], T0, LEASE_S)]
        return run

    try:
        assert run_together([claimer(k) for k in range(len(workers))]) == []
    finally:
        for worker in workers:
            worker.store.close()

    claims = [claim for mine in got for claim in mine]
    by_session: dict[str, set[str]] = {}
    for owner, sid, _ in claims:
        by_session.setdefault(sid, set()).add(owner)
    assert all(len(owners_of) == 1 for owners_of in by_session.values())  # one daemon per session
    counts = Counter(sid for _, sid, _ in claims)
    for lease in a.leases(sids):
        if lease.session_id in counts:
            # every claim added exactly one to the epoch (a re-claim by its own daemon too)
            assert lease.epoch == counts[lease.session_id]
            assert {lease.owner_id} == by_session[lease.session_id]
    epochs = [(sid, epoch) for _, sid, epoch in claims]
    assert len(epochs) == len(set(epochs))  # no epoch handed out twice
    assert len(counts) > 100  # the race was real: nearly every session was claimed


def test_epoch_grows_with_every_claim_and_never_goes_back(daemons) -> None:
    a, b = daemons("a", "b")
    sid, = new_sessions(a, 1)

    assert a.claim([sid], "a", at(0), LEASE_S) == [(sid, 1)]
    assert a.claim([sid], "a", at(1), LEASE_S) == [(sid, 2)]  # a new incarnation of its own
    assert b.claim([sid], "b", at(2), LEASE_S) == []  # a's lease is live
    assert b.claim([sid], "b", at(20), LEASE_S) == [(sid, 3)]  # expired: b takes it
    assert b.release("b", [sid], now=at(20)) == 1
    assert a.claim([sid], "a", at(21), LEASE_S) == [(sid, 4)]
    assert a.finish("a", [sid], now=at(21)) == 1
    assert b.claim([sid], "b", at(22), LEASE_S) == [(sid, 5)]
    lease = a.owner_of(sid)
    assert (lease.owner_id, lease.epoch, lease.lease_expires_at) == ("b", 5, at(22 + LEASE_S))


def test_claim_by_query_and_unknown_ids(daemons) -> None:
    a, = daemons("a")
    sids = new_sessions(a, 4)
    a.store.update_session(sids[1], status="running")
    S = a.store.m.Session

    assert a.claim(S.select(S.id).where(S.status == "running"), "a", T0, LEASE_S) == [(sids[1], 1)]
    assert a.claim(["no-such-session"], "a", T0, LEASE_S) == []
    assert len(a.claim(sids, "a", T0, LEASE_S, limit=2)) == 2


def test_a_claim_skips_a_lease_a_write_is_holding(daemons, pg_url: str) -> None:
    # An in-flight fenced write holds its lease (FOR KEY SHARE): a claim skips it rather
    # than waiting, and takes it once the write committed.
    a, b = daemons("a", "b")
    sid, = new_sessions(a, 1)
    a.claim([sid], "a", at(0), LEASE_S)
    writer = psycopg2.connect(pg_url.split("?")[0], options=_options(pg_url))
    try:
        with writer.cursor() as cur:
            cur.execute("INSERT INTO session_messages (session_id, role, content, cost_usd, timestamp, "
                        "writer_epoch) VALUES (%s, 'assistant', 'mid-write', 0, now(), 1)", (sid,))
            assert b.claim_expired("b", at(20), LEASE_S, 2, 100) == []
        writer.commit()
    finally:
        writer.close()
    assert b.claim_expired("b", at(20), LEASE_S, 2, 100) == [(sid, 2)]


# --- fencing ----------------------------------------------------------------------------------


def test_a_stale_owner_cannot_write_once_another_claimed(daemons) -> None:
    a, b = daemons("a", "b")
    sid, = new_sessions(a, 1)
    (_, epoch_a), = a.claim([sid], "a", at(0), LEASE_S)
    insert_message(a.store, sid, epoch_a, "from a")
    a.store.update_session(sid, status="running", writer_epoch=epoch_a)
    (_, epoch_b), = b.claim_expired("b", at(20), LEASE_S, 2, 100)  # a paused past its lease
    assert epoch_b == epoch_a + 1

    with pytest.raises(FencedWrite, match=f"epoch {epoch_b}.*carries epoch {epoch_a}"):
        insert_message(a.store, sid, epoch_a, "late from a")
    with pytest.raises(FencedWrite):
        a.store.update_session(sid, status="idle", writer_epoch=epoch_a)
    S = a.store.m.Session
    with pytest.raises(FencedWrite):  # the turn's usage
        with a.store.transaction():
            S.update(total_cost_usd=S.total_cost_usd + 1.0, writer_epoch=epoch_a).where(S.id == sid).execute()
    a.store.fence(sid, epoch_a)  # the store's own statements carry the fenced epoch
    with pytest.raises(FencedWrite):  # a user turn opened
        a.store.open_turn(sid, total_turns=1)
    with pytest.raises(FencedWrite):  # the turn's usage, as the store writes it
        a.store.add_session_usage(sid, cost_usd=1.0, turns=1)
    a.store.unfence(sid)

    insert_message(b.store, sid, epoch_b, "from b")  # the new owner writes
    b.store.update_session(sid, status="running", writer_epoch=epoch_b)
    insert_message(a.store, sid, None, "unfenced")  # a write without an epoch is never refused
    assert [m.content for m in b.store.messages(sid)] == ["from a", "from b", "unfenced"]
    row = b.store.get_session(sid)
    assert (row.status, row.total_cost_usd, row.writer_epoch) == ("running", 0.0, None)  # NULL at rest


def test_fencing_covers_multi_row_inserts_and_executemany(daemons) -> None:
    a, b = daemons("a", "b")
    s1, s2 = new_sessions(a, 2)
    a.claim([s1, s2], "a", at(0), LEASE_S)
    b.claim([s2], "b", at(20), LEASE_S)  # s2 moved on to epoch 2; s1 is still a's at epoch 1
    sql = ("INSERT INTO session_messages (session_id, role, content, cost_usd, timestamp, writer_epoch) "
           "VALUES (%s, 'assistant', %s, 0, now(), %s)")

    # the writer thread's shape: one statement, rows of several sessions
    with pytest.raises(FencedWrite):
        with a.store.transaction():
            a.store.db.execute_sql(sql.replace("%s)", "%s), (%s, 'assistant', %s, 0, now(), %s)"),
                                   (s1, "ok", 1, s2, "stale", 1))
    with pytest.raises(FencedWrite):
        with a.store.transaction(), pw.__exception_wrapper__:  # as peewee runs a statement
            a.store.db.cursor().executemany(sql, [(s1, "ok", 1), (s2, "stale", 1)])
    assert a.store.count_messages(s1) == a.store.count_messages(s2) == 0  # all or nothing
    with a.store.transaction(), pw.__exception_wrapper__:
        a.store.db.cursor().executemany(sql, [(s1, "ok", 1), (s2, "current", 2)])
    assert a.store.count_messages(s1) == a.store.count_messages(s2) == 1


def test_a_stale_owners_turn_charge_is_refused_whole(daemons) -> None:
    a, b = daemons("a", "b")
    sid, = new_sessions(a, 1)
    a.claim([sid], "a", at(0), LEASE_S)
    b.claim([sid], "b", at(20), LEASE_S)
    ledger = Ledger(a.store)
    ledger.open_account("alice", 10)
    T = a.store.m.CreditTransaction

    with pytest.raises(FencedWrite):
        with a.store.transaction():  # the deduction and its transaction row: one transaction
            ledger.deduct("alice", 1, low_threshold=0)
            T.insert(participant="alice", type="deduction", amount=-1, balance_after=8, session_id=sid,
                     writer_epoch=1).execute()
    assert ledger.balance("alice") == 10
    assert ledger.count_transactions("alice", "deduction") == 0


def test_a_fenced_write_waits_for_a_claim_in_flight_then_is_refused(daemons, pg_url: str) -> None:
    # A claim and a stale write of the same session serialise: the write, blocked on the
    # claimer's row lock, sees the new epoch once the claim commits.
    a, b = daemons("a", "b")
    sid, = new_sessions(a, 1)
    a.claim([sid], "a", at(0), LEASE_S)
    claimer = psycopg2.connect(pg_url.split("?")[0], options=_options(pg_url))
    outcome: list[BaseException | None] = []
    try:
        with claimer.cursor() as cur:
            cur.execute("SELECT epoch FROM session_leases WHERE session_id = %s FOR UPDATE", (sid,))
            cur.execute("UPDATE session_leases SET epoch = epoch + 1, owner_id = 'b' WHERE session_id = %s", (sid,))

            def write() -> None:
                try:
                    insert_message(a.store, sid, 1)
                    outcome.append(None)
                except FencedWrite as exc:
                    outcome.append(exc)

            thread = threading.Thread(target=write)
            thread.start()
            _wait_for_lock_wait(pg_url)
            assert not outcome  # waiting for the claim
        claimer.commit()
        thread.join(JOIN_TIMEOUT_S)
    finally:
        claimer.close()
    assert len(outcome) == 1 and isinstance(outcome[0], FencedWrite)


# --- heartbeats -------------------------------------------------------------------------------


def test_heartbeat_is_one_statement_and_renews_only_its_own_leases(daemons, monkeypatch) -> None:
    a, b = daemons("a", "b")
    sids = new_sessions(a, 6)
    a.claim(sids[:4], "a", at(0), LEASE_S)
    b.claim(sids[4:], "b", at(0), LEASE_S)
    b.claim(sids[:1], "b", at(16), LEASE_S)  # a's first lease expired and was taken
    statements = counted_statements(monkeypatch, a.store)
    assert a.heartbeat("a", at(17), LEASE_S) == 3
    assert len(statements) == 1

    leases = {lease.session_id: lease for lease in a.leases(sids)}
    assert [leases[s].lease_expires_at for s in sids[1:4]] == [at(17 + LEASE_S)] * 3
    assert leases[sids[0]].owner_id == "b" and leases[sids[0]].lease_expires_at == at(16 + LEASE_S)
    assert [leases[s].lease_expires_at for s in sids[4:]] == [at(LEASE_S)] * 2
    assert a.daemon_state("a") == DaemonState.LIVE


def test_a_daemon_declared_gone_is_fenced_until_it_registers_again(daemons) -> None:
    a, b = daemons("a", "b")
    sids = new_sessions(a, 2)
    a.claim(sids, "a", at(0), LEASE_S)
    b.heartbeat("b", at(50), LEASE_S)

    assert b.expire_dead_daemons(at(61), 60.0) == ["a"]
    assert b.live_daemons(at(61), 60.0) == ["b"]
    with pytest.raises(FencedWrite, match="declared gone"):
        a.heartbeat("a", at(62), LEASE_S)
    with pytest.raises(FencedWrite):
        a.claim(sids, "a", at(62), LEASE_S)
    assert a.owner_of(sids[0]).lease_expires_at == at(LEASE_S)  # the heartbeat renewed nothing

    assert sorted(a.register_daemon("a", "host-a", 2000, "test", at(63))) == []  # its leases had expired
    assert a.daemon_state("a") == DaemonState.LIVE
    # it stopped their incarnations when it was refused: the leases are nobody's now, not
    # renewed with nothing running, and the next sweep (its own here) takes them
    assert a.heartbeat("a", at(64), LEASE_S) == 0
    assert {lease.owner_id for lease in a.leases(sids)} == {None}
    assert sorted(c.session_id for c in a.claim_expired("a", at(64), LEASE_S, 2, 100)) == sorted(sids)


def test_a_sweeping_daemon_never_declares_itself_gone(daemons) -> None:
    a, b = daemons("a", "b")  # both last beat at T0
    assert a.expire_dead_daemons(at(61), 60.0, sparing="a") == ["b"]  # a, late but sweeping, is alive
    assert a.daemon_state("a") == DaemonState.LIVE
    assert a.heartbeat("a", at(62), LEASE_S) == 0


def test_registering_again_expires_the_earlier_lifes_leases(daemons) -> None:
    a, b = daemons("a", "b")
    sids = new_sessions(a, 3)
    a.claim(sids, "a", at(0), LEASE_S)

    assert a.register_daemon("a", "host-a", 4242, "test", at(5)) == sorted(sids)  # a restart
    assert [c.session_id for c in b.claim_expired("b", at(5), LEASE_S, 2, 100)] == sorted(sids)


# --- failover sweeps --------------------------------------------------------------------------


def test_expired_leases_are_claimed_fairly(daemons) -> None:
    a, b, c = daemons("a", "b", "c")
    sids = new_sessions(a, 10)
    a.claim(sids, "a", at(0), LEASE_S)
    for cluster, name in ((b, "b"), (c, "c")):
        cluster.heartbeat(name, at(20), LEASE_S)
    live = len(b.live_daemons(at(20), LEASE_S))
    assert live == 2  # a stopped beating

    first = b.claim_expired("b", at(20), LEASE_S, live, 100)
    assert len(first) == 6  # ceil(10 / 2) + 1
    second = c.claim_expired("c", at(20), LEASE_S, live, 100)
    assert len(second) == 3  # ceil(4 / 2) + 1
    third = b.claim_expired("b", at(20), LEASE_S, live, 100)
    assert len(third) == 1
    assert {x.session_id for x in first + second + third} == set(sids)
    assert all(x.epoch == 2 for x in first + second + third)
    assert b.claim_expired("b", at(20), LEASE_S, live, 100) == []


def test_a_sweep_stops_at_max_sessions(daemons) -> None:
    a, b = daemons("a", "b")
    sids = new_sessions(a, 12)
    a.claim(sids[:10], "a", at(0), LEASE_S)
    b.claim(sids[10:], "b", at(20), LEASE_S)

    assert len(b.claim_expired("b", at(20), LEASE_S, 1, max_sessions=5)) == 3  # owns 2, room for 3
    assert b.claim_expired("b", at(20), LEASE_S, 1, max_sessions=5) == []


def test_concurrent_sweeps_take_disjoint_shares(daemons) -> None:
    dead, *sweepers = daemons("dead", "s1", "s2", "s3")
    sids = new_sessions(dead, 30)
    dead.claim(sids, "dead", at(0), LEASE_S)
    got: dict[str, list[str]] = {}

    def sweep(cluster: ClusterStore, name: str) -> Callable[[], None]:
        def run() -> None:
            got[name] = [x.session_id for x in cluster.claim_expired(name, at(20), LEASE_S, 3, 100)]
        return run

    assert run_together([sweep(cluster, f"s{i + 1}") for i, cluster in enumerate(sweepers)]) == []
    taken = [sid for mine in got.values() for sid in mine]
    assert len(taken) == len(set(taken))
    assert all(len(mine) <= 11 for mine in got.values())  # ceil(30 / 3) + 1


def test_sessions_to_resume_without_a_lease_are_claimed_once_by_daemons_starting_together(daemons) -> None:
    # rows from a run without leases (one daemon, before the cluster mode), and leased ones
    a, b, c = daemons("a", "b", "c")
    sids = new_sessions(a, 60)
    marked, stale, plain = sids[:20], sids[20:40], sids[40:50]
    held, ended, released = sids[50:53], sids[53:56], sids[56:]
    a.store.mark_for_resume(marked + held + ended + released, stopped=True)  # a shutdown's marks
    for sid in stale:  # a crash left them running
        a.store.update_session(sid, status="running", pid=7)
    c.claim(held + ended + released, "c", at(0), LEASE_S)
    c.finish("c", ended, now=at(0))
    c.set_daemon_state("c", DaemonState.DRAINING)
    c.release("c", released, now=at(0))
    got: dict[str, list[tuple[str, int]]] = {}

    def start_up(cluster: ClusterStore, name: str) -> Callable[[], None]:
        def run() -> None:
            got[name] = [tuple(x) for x in cluster.claim_unleased_resumes(name, at(1), LEASE_S)]
        return run

    assert run_together([start_up(a, "a"), start_up(b, "b")]) == []
    taken = [sid for mine in got.values() for sid, _ in mine]
    assert sorted(taken) == sorted(marked + stale + ended)  # each once; held and released are not
    assert {epoch for mine in got.values() for _, epoch in mine} == {1, 2}  # ended: its second claim
    assert all(a.owner_of(sid).owner_id in ("a", "b") for sid in taken)
    assert a.leases(plain) == []  # nothing to resume: no lease row either
    rows = {sid: a.store.get_session(sid) for sid in sids}
    assert [sid for sid in sids if rows[sid].restart_pending] == held + released  # the sweep's
    assert {rows[sid].status for sid in stale} == {"idle"} and {rows[sid].pid for sid in stale} == {None}
    assert {rows[sid].status for sid in marked} == {"stopped"}
    assert a.claim_unleased_resumes("a", at(2), LEASE_S) == []  # nothing left
    assert [x.session_id for x in b.claim_expired("b", at(2), LEASE_S, 1, 100)] == sorted(released)


def test_claiming_sessions_to_resume_stops_at_the_limit(daemons) -> None:
    a, = daemons("a")
    sids = sorted(new_sessions(a, 5))
    a.store.mark_for_resume(sids)
    assert [x.session_id for x in a.claim_unleased_resumes("a", at(0), LEASE_S, limit=2)] == sids[:2]
    assert [x.session_id for x in a.claim_unleased_resumes("a", at(0), LEASE_S)] == sids[2:]


def test_released_sessions_are_swept_at_once_and_finished_ones_never(daemons) -> None:
    a, b = daemons("a", "b")
    sids = new_sessions(a, 4)
    a.claim(sids, "a", at(0), LEASE_S)
    a.set_daemon_state("a", DaemonState.DRAINING)

    assert a.release("a", sids[:2], now=at(0)) == 2
    assert a.finish("a", sids[2:3], now=at(0)) == 1
    assert a.release("b", sids[3:], now=at(0)) == 0  # not b's to release
    assert a.claim(sids, "a", at(1), LEASE_S) == []  # a draining daemon claims nothing
    taken = b.claim_expired("b", at(1), LEASE_S, 2, 100)  # no lease has expired yet
    assert sorted(x.session_id for x in taken) == sorted(sids[:2])
    assert a.owned_by("a") == [sids[3]]
    assert a.release("a", now=at(1)) == 1  # the rest of a's leases
    assert [x.session_id for x in b.claim_expired("b", at(2), LEASE_S, 2, 100)] == [sids[3]]
    assert a.owner_of(sids[2]).owner_id is None  # finished: left alone


def test_durable_timers_move_with_the_session(daemons) -> None:
    a, b = daemons("a", "b")
    sid, = new_sessions(a, 1)
    (_, epoch), = a.claim([sid], "a", at(0), LEASE_S)
    assert a.set_timers("a", sid, epoch, restart_due_at=at(30), inactivity_due_at=at(1800))
    with pytest.raises(ValueError, match="unknown lease timers"):
        a.set_timers("a", sid, epoch, wake_at=at(1))

    (_, new_epoch), = b.claim_expired("b", at(20), LEASE_S, 2, 100)
    lease = b.owner_of(sid)
    assert (lease.restart_due_at, lease.resume_due_at, lease.inactivity_due_at) == (at(30), None, at(1800))
    assert not a.set_timers("a", sid, epoch, restart_due_at=at(99))  # a's incarnation is stale
    assert b.set_timers("b", sid, new_epoch, restart_due_at=None)
    assert b.owner_of(sid).restart_due_at is None


def test_inactivity_deadlines_are_stored_in_one_statement_guarded_by_owner_and_epoch(daemons, monkeypatch) -> None:
    a, b = daemons("a", "b")
    sids = new_sessions(a, 5)
    epochs = dict(a.claim(sids, "a", at(0), LEASE_S))
    a.set_timers("a", sids[3], epochs[sids[3]], inactivity_due_at=at(50))
    (_, b_epoch), = b.claim(sids[4:], "b", at(16), LEASE_S)  # a's lease expired and b took it
    statements = counted_statements(monkeypatch, a.store)
    written = a.set_inactivity_deadlines("a", [
        Deadline(sids[0], epochs[sids[0]], at(1800)),
        Deadline(sids[1], epochs[sids[1]], at(1801.5), at(300)),  # with its idle exit (issue 36)
        Deadline(sids[2], epochs[sids[2]] - 1, at(99)),  # a stale incarnation's: refused
        Deadline(sids[3], epochs[sids[3]], None),  # a turn started: cleared
        Deadline(sids[4], epochs[sids[4]], at(99)),  # b's now: refused
    ])
    assert (written, len(statements)) == (3, 1)
    monkeypatch.undo()
    due = {lease.session_id: lease.inactivity_due_at for lease in a.leases(sids)}
    assert [due[sid] for sid in sids] == [at(1800), at(1801.5), None, None, None]
    idle = {lease.session_id: lease.idle_due_at for lease in a.leases(sids)}
    assert [idle[sid] for sid in sids] == [None, at(300), None, None, None]
    assert a.set_inactivity_deadlines("a", []) == 0
    assert b.set_inactivity_deadlines("b", [Deadline(sids[4], b_epoch, at(7))]) == 1
    assert b.owner_of(sids[4]).inactivity_due_at == at(7)


def test_a_new_session_goes_to_the_least_loaded_live_daemon(daemons) -> None:
    a, b, c = daemons("a", "b", "c")
    sids = new_sessions(a, 5)
    a.claim(sids[:3], "a", at(0), LEASE_S)
    b.claim(sids[3:4], "b", at(0), LEASE_S)
    c.claim(sids[4:], "c", at(0), LEASE_S)

    assert a.place_new_session(at(1), 30.0) == "b"  # b and c hold one each: the smaller id
    c.set_daemon_state("c", DaemonState.DRAINING)
    b.heartbeat("b", at(1), LEASE_S)
    assert a.place_new_session(at(40), 30.0) is None  # a's and b's heartbeats are too old
    a.heartbeat("a", at(40), LEASE_S)
    assert a.place_new_session(at(40), 30.0) == "a"
    assert a.place_new_session(at(40), 30.0, max_sessions=3) is None


# --- migration ----------------------------------------------------------------------------------


def test_migration_from_version_5_adds_the_cluster_schema(pg_url: str, open_store) -> None:
    old = open_store(pg_url)
    sid = old.create_session(name="from before").id
    for table in ("sessions", "session_messages", "credit_transactions"):
        old.db.execute_sql(f'DROP TRIGGER IF EXISTS {TRIGGER_NAME} ON "{table}"')
        old.db.execute_sql(f'ALTER TABLE "{table}" DROP COLUMN writer_epoch')
    old.db.execute_sql("DROP TABLE session_leases, daemons")
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 6).execute()
    old.close()

    store = open_store(pg_url)
    assert store.schema_version >= 6
    triggers = {row[0] for row in store.db.execute_sql(  # this schema's (other tests' schemas have theirs)
        "SELECT c.relname FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid "
        "WHERE t.tgname = %s AND c.relnamespace = current_schema()::regnamespace", (TRIGGER_NAME,))}
    assert triggers == {"sessions", "session_messages", "credit_transactions"}
    cluster = ClusterStore(store)
    cluster.register_daemon("a", "h", 1, "test", T0)
    assert cluster.claim([sid], "a", T0, LEASE_S) == [(sid, 1)]
    assert store.get_session(sid).name == "from before"


# --- helpers ----------------------------------------------------------------------------------


def _options(pg_url: str) -> str:
    """The libpq ``options`` of a schema URL (its search_path), for a raw connection."""
    from urllib.parse import parse_qs, urlsplit

    return parse_qs(urlsplit(pg_url).query)["options"][0]


def _wait_for_lock_wait(pg_url: str) -> None:
    """Until some backend of the database waits for a row lock (bounded)."""
    import time

    probe = psycopg2.connect(pg_url.split("?")[0])
    probe.autocommit = True
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    try:
        with probe.cursor() as cur:
            while time.monotonic() < deadline:
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND wait_event_type = 'Lock'")
                if cur.fetchone()[0]:
                    return
                time.sleep(0.01)
    finally:
        probe.close()
    raise AssertionError("the write never waited for the claim's lock")



def test_a_lease_offered_to_one_daemon_is_its_until_it_expires(daemons) -> None:
    # issue 36 item 7: a rebalance releases a lease offered to the least-loaded daemon
    a, b, c = daemons("a", "b", "c")
    sids = new_sessions(a, 3)
    a.claim(sids, "a", at(0), LEASE_S)
    assert a.load(at(1), 60.0) == {"a": 3, "b": 0, "c": 0}
    assert a.release("a", sids[:2], now=at(1), reason="rebalance", offered_to="b") == 2
    assert a.load(at(1), 60.0) == {"a": 1, "b": 2, "c": 0}  # a hand-over not yet taken counts for b
    assert a.claim_expired("a", at(2), LEASE_S, 3, 100) == []  # not the releaser's to take back
    assert c.claim_expired("c", at(2), LEASE_S, 3, 100) == []  # nor anyone else's
    assert [x.session_id for x in b.claim_expired("b", at(2), LEASE_S, 3, 100)] == sorted(sids[:2])
    assert a.owner_of(sids[0]).owner_id == "b"
    # an offer the target never took: anyone's once the lease (b's claim at 2 s) has expired
    assert b.release("b", sids[:1], now=at(3), reason="rebalance", offered_to="c") == 1
    assert a.claim_expired("a", at(1 + LEASE_S), LEASE_S, 3, 100) == []
    taken = a.claim_expired("a", at(2 + LEASE_S), LEASE_S, 3, 100)  # and b's own, expired: a failover
    assert sorted(x.session_id for x in taken) == sorted(sids[:2])
    assert [o.reason_in for o in a.ownership(sids[0])] == ["start", "rebalance", "rebalance"]
    assert [o.reason_in for o in a.ownership(sids[1])] == ["start", "rebalance", "failover"]
