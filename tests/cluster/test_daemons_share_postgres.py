"""Several runtimes on one PostgreSQL (issue 20), in one process on a real clock with short
leases: each running session has exactly one owner; a daemon that can no longer reach the
database loses its sessions to another, which resumes them (a turn only for the one that
was mid-turn); when the first comes back, its writes are refused by fencing and it stops
its stale incarnations without publishing anything.

Timings: heartbeat 50 ms, lease 300 ms, sweep every 50 ms. Every wait is bounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from corvid_actors import Runtime
from corvid_actors.clock import RealClock
from corvid_actors.config import Config
from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.ledger import Ledger
from corvid_actors.db.store import Store
from corvid_actors.errors import ConfigError, FencedWrite
from corvid_actors.testing import ScriptedProvider, Turn
from corvid_actors.testing.tcp_proxy import TcpProxy
from tests.cluster.conftest import WAIT_S, wait_for

pytestmark = pytest.mark.postgres


CLUSTER = {"enabled": True, "heartbeat_s": 0.05, "lease_s": 0.3, "sweep_interval_s": 0.05,
           "sweep_jitter_s": 0.01, "dead_daemon_grace_s": 0.6}




class Daemon:
    """One runtime ("daemon") of the cluster, with its own connection(s) and provider."""

    def __init__(self, name: str, url: str, tmp: Any, supervisor: dict[str, Any] | None = None) -> None:
        self.name = name
        self.model = ScriptedProvider(RealClock(), default_reply=f"reply from {name}")
        cfg = Config().replace(cluster={**CLUSTER, "daemon_id": name},
                               providers={"default_provider": "scripted"}, supervisor=supervisor or {})
        self.store = Store(url)
        self.runtime = Runtime(cfg, store=self.store, providers={"scripted": self.model},
                               workspace_dir=tmp / name)
        self.events: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self.runtime.subscribe_all(self._record)

    def _record(self, sid: str, event: Any) -> None:
        with self._lock:
            self.events.append((sid, event))

    def events_of(self, sid: str) -> list[Any]:
        with self._lock:
            return [e for s, e in self.events if s == sid]

    def running(self) -> set[str]:
        return set(self.runtime.get_active_session_ids())

    def close(self) -> None:
        try:
            self.runtime.shutdown(settle_timeout_s=WAIT_S)
        finally:
            self.store.close()


@pytest.fixture
def cluster(pg_url: str, tmp_path: Any) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(name: str, url: str | None = None, **supervisor: Any) -> Daemon:
        daemon = Daemon(name, url or pg_url, tmp_path, supervisor)
        made.append(daemon)
        return daemon

    yield make
    for daemon in reversed(made):
        daemon.close()


def owners(url: str, sids: list[str]) -> dict[str, str | None]:
    store = Store(url)
    try:
        leases = ClusterStore(store).leases(sids)
        return {lease.session_id: lease.owner_id for lease in leases}
    finally:
        store.close()


def test_a_running_session_has_one_owner_and_another_daemon_cannot_start_it(cluster, pg_url):
    a, b = cluster("a"), cluster("b")
    sid = a.runtime.create_session(source="web", name="one").id
    assert a.runtime.start_process(sid, "hi") is not None
    wait_for(lambda: any(e.type == "result" for e in a.events_of(sid)), "a's turn")
    assert owners(pg_url, [sid]) == {sid: "a"}

    assert b.runtime.start_process(sid, "me too") is None
    refused = wait_for(lambda: [e for e in b.events_of(sid) if e.type == "error"], "b's refusal")
    assert refused[0].error_type == "owned_elsewhere" and "daemon a" in refused[0].message
    assert b.runtime.resume_process(sid, "and me") is None
    # refused before anything was written: the other daemon's conversation is untouched
    assert not {"me too", "and me"} & {m.content for m in b.store.messages(sid)}
    assert sid in a.running() and sid not in b.running()
    assert owners(pg_url, [sid]) == {sid: "a"}


def test_a_session_stopped_here_ends_its_lease_and_may_start_elsewhere(cluster, pg_url):
    a, b = cluster("a"), cluster("b")
    sid = a.runtime.create_session(source="web").id
    a.runtime.start_process(sid, "hi")
    wait_for(lambda: any(e.type == "result" for e in a.events_of(sid)), "a's turn")
    a.runtime.stop_process(sid)
    wait_for(lambda: owners(pg_url, [sid]) == {sid: None}, "the lease ended")
    time.sleep(0.2)  # a few sweeps: an ended lease is nobody's to resume
    assert sid not in b.running()
    assert b.runtime.start_process(sid, "now here") is not None
    assert owners(pg_url, [sid]) == {sid: "b"}


def test_a_daemon_cut_off_loses_its_sessions_to_another_which_resumes_only_the_interrupted(
        cluster, pg_url):
    proxy = TcpProxy("127.0.0.1", 5432).start()
    try:
        a = cluster("a", proxy.url(pg_url))
        idle = [a.runtime.create_session(source="web", name=f"idle{i}").id for i in range(4)]
        busy = a.runtime.create_session(source="web", name="busy").id
        for sid in idle:
            a.runtime.start_process(sid, "hello")
        wait_for(lambda: all(any(e.type == "result" for e in a.events_of(s)) for s in idle), "idle turns")
        a.model.for_session(busy, Turn.reply("never arrives", latency_s=30))
        a.runtime.start_process(busy, "a long question")
        wait_for(lambda: busy in a.running(), "busy runs")
        b = cluster("b")
        b.model.for_session(busy, Turn.reply("answered by b"))

        proxy.partition()  # a can no longer reach the database: as dead, for the others
        everything = [*idle, busy]
        wait_for(lambda: b.running() >= set(everything), "b runs every session of a", timeout_s=WAIT_S)
        assert owners(pg_url, everything) == {sid: "b" for sid in everything}
        # the interrupted turn is answered once on b; the idle sessions were given no turn
        wait_for(lambda: any(e.type == "result" for e in b.events_of(busy)), "busy answered on b")
        assert [r.session_id for r in b.model.requests] == [busy]
        def started_on_b() -> dict[str, list[Any]]:
            return {sid: [e for e in b.events_of(sid) if e.type == "session_started"] for sid in everything}

        # running is the supervisor's word; the event reaches the subscriber a moment later
        wait_for(lambda: all(started_on_b().values()), "b's session_started of each")
        assert all(len(v) == 1 for v in started_on_b().values())
        # a's lease ran out: nothing of its incarnations is published any more
        quiet_from = len(a.events)
        proxy.admit()
        # back: its heartbeat finds the leases gone and stops its incarnations, silently
        wait_for(lambda: not (a.running() & set(everything)), "a stopped its stale incarnations")
        assert len(a.events) == quiet_from
        assert owners(pg_url, everything) == {sid: "b" for sid in everything}
        # a's late writes for those sessions are refused by the database
        with pytest.raises(FencedWrite):
            a.store.append_message(busy, "assistant", "stale")
        assert "stale" not in [m.content for m in b.store.messages(busy)]
    finally:
        proxy.close()


def test_a_daemon_declared_gone_gets_its_sessions_running_again(cluster, pg_url):
    # Under load a daemon's heartbeat can stall past the grace; another daemon's sweep (or
    # an operator) declares it gone. Its next heartbeat is refused, it stops its sessions
    # and registers again: nobody claimed them, so they must run again (here or elsewhere),
    # not stay leased to it with nothing running (the flake of the takeover tests).
    a = cluster("a")
    sids = [a.runtime.create_session(source="web").id for _ in range(3)]
    for sid in sids:
        a.runtime.start_process(sid, "hi")
    wait_for(lambda: all(any(e.type == "result" for e in a.events_of(s)) for s in sids), "turns on a")
    before = {lease.session_id: lease.epoch for lease in leases_of(pg_url, sids)}
    declare_gone(pg_url, "a")
    wait_for(lambda: all(len([e for e in a.events_of(s) if e.type == "session_started"]) == 2 for s in sids),
             "each session started again")
    wait_for(lambda: a.running() >= set(sids), "a runs them again")
    after = {lease.session_id: lease for lease in leases_of(pg_url, sids)}
    assert {sid: lease.owner_id for sid, lease in after.items()} == {sid: "a" for sid in sids}
    assert all(after[sid].epoch > before[sid] for sid in sids)  # new incarnations, fenced anew
    assert a.model.requests and len(a.model.requests) == len(sids)  # none was mid-turn: no new turn


def leases_of(url: str, sids: list[str]) -> list[Any]:
    store = Store(url)
    try:
        return ClusterStore(store).leases(sids)
    finally:
        store.close()


def declare_gone(url: str, daemon_id: str) -> None:
    store = Store(url)
    try:
        assert ClusterStore(store).set_daemon_state(daemon_id, "gone")
    finally:
        store.close()


def test_a_shutdown_hands_the_sessions_over_at_once(cluster, pg_url):
    a, b = cluster("a"), cluster("b")
    sids = [a.runtime.create_session(source="web").id for _ in range(3)]
    for sid in sids:
        a.runtime.start_process(sid, "hi")
    wait_for(lambda: all(any(e.type == "result" for e in a.events_of(s)) for s in sids), "turns on a")
    a.runtime.shutdown(settle_timeout_s=WAIT_S)
    wait_for(lambda: b.running() >= set(sids), "b resumed them")
    assert owners(pg_url, sids) == {sid: "b" for sid in sids}
    assert b.model.requests == []  # none was mid-turn: no turn is spent on them


def test_an_outage_pause_is_resumed_by_the_new_owner_at_its_due_time(cluster, pg_url):
    proxy = TcpProxy("127.0.0.1", 5432).start()
    try:
        a = cluster("a", proxy.url(pg_url), auto_resume_base_s=1.2)
        b = cluster("b", auto_resume_base_s=1.2)
        sid = a.runtime.create_session(source="web").id
        a.model.for_session(sid, Turn.outage("503"))
        b.model.for_session(sid, Turn.reply("back"))
        a.runtime.start_process(sid, "hi")
        paused = wait_for(lambda: [e for e in a.events_of(sid) if e.type == "session_paused"], "paused on a")
        due = datetime.fromisoformat(paused[0].resume_at)
        proxy.partition()  # a dies while the session waits for its auto-resume
        wait_for(lambda: sid in b.runtime.get_paused_session_ids(), "b holds the pause")
        resumed = wait_for(lambda: [e for e in b.events_of(sid) if e.type == "session_resumed"], "resumed on b")
        at = datetime.now(UTC)
        assert due <= at < due + timedelta(seconds=0.5)  # at its due time, not at the takeover
        assert resumed[0].automatic is True and b.model.health_probes == 1
        wait_for(lambda: any(e.type == "result" for e in b.events_of(sid)), "the interrupted turn answered on b")
        assert owners(pg_url, [sid]) == {sid: "b"}
    finally:
        proxy.close()


def test_store_writes_of_a_stale_owner_are_refused(pg_url, open_store):
    one, two = ClusterStore(open_store(pg_url)), ClusterStore(open_store(pg_url))
    now = datetime.now(UTC)
    for cluster_store, name in ((one, "one"), (two, "two")):
        cluster_store.register_daemon(name, "h", 1, "t", now)
    sid = one.store.create_session(name="s").id
    [claim] = one.claim([sid], "one", now, 0.2)
    one.store.fence(sid, claim.epoch)
    one.store.append_message(sid, "user", "accepted")
    one.store.update_session(sid, status="running")
    time.sleep(0.25)
    [newer] = two.claim([sid], "two", datetime.now(UTC), 15)
    assert newer.epoch == claim.epoch + 1
    with pytest.raises(FencedWrite):
        one.store.append_message(sid, "assistant", "stale")
    with pytest.raises(FencedWrite):
        one.store.update_session(sid, status="idle")
    with pytest.raises(FencedWrite):
        one.store.add_session_usage(sid, cost_usd=1.0, turns=1, answered=True)
    Ledger(one.store).credit("alice", 10)
    with pytest.raises(FencedWrite):  # the stale owner's turn charge, refused whole
        Ledger(one.store).deduct("alice", 3, low_threshold=0, session_id=sid)
    assert Ledger(two.store).balance("alice") == 10
    two.store.fence(sid, newer.epoch)
    two.store.append_message(sid, "assistant", "fresh")
    assert [m.content for m in two.store.messages(sid)] == ["accepted", "fresh"]
    assert two.store.get_session(sid).status == "running"


def test_cluster_mode_refuses_a_sqlite_store(tmp_path):
    cfg = Config().replace(cluster={"enabled": True})
    with pytest.raises(ConfigError, match="PostgreSQL"):
        Runtime(cfg, store_url=f"sqlite:///{tmp_path}/one.db")
