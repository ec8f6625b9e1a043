"""A store outage is not a race for every session (issue 36, item 3), in simulated time:
two runtimes ("daemons") on one simulated clock, each reaching PostgreSQL through its own
TCP proxy. With the database gone for both longer than ``lease_s``, every lease lapses;
when it comes back, each daemon sweeps nothing (and declares nobody gone) until one
heartbeat plus ``outage_grace_s`` after it saw the store back, so the owners' heartbeats
renew their leases first and nobody's sessions change hands. A daemon that stays cut off
after the outage is a dead one: its sessions are taken once that grace has passed."""

from __future__ import annotations

import pytest

from corvid_actors.actors.cluster import sweep_resumes_at
from corvid_actors.db.cluster import ClusterStore
from tests.cluster.conftest import SIM_CLUSTER, sim_pair

pytestmark = pytest.mark.postgres

GRACE_S = 5.0


def test_after_an_outage_longer_than_the_lease_every_owner_keeps_its_sessions(pg_url):
    with sim_pair(pg_url, b_proxy=True, cluster={"outage_grace_s": GRACE_S}) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        on_a = [a.create_session(source="web").id for _ in range(3)]
        on_b = [b.create_session(source="web").id for _ in range(3)]
        for sid in on_a:
            a.start_process(sid, "hi")
        for sid in on_b:
            b.start_process(sid, "hi")
        clock.advance_to(6)  # answered; a heartbeat at 5 renewed every lease until 20
        sim.store_outage()
        clock.advance_to(90)  # every lease lapsed long ago, and so did every heartbeat
        sim.store_back()
        clock.advance_to(150)  # many sweeps later
        leases = {lease.session_id: lease for lease in ClusterStore(b.internals.store).leases(on_a + on_b)}
        assert {sid: leases[sid].owner_id for sid in on_a + on_b} == {**dict.fromkeys(on_a, "a"),
                                                                        **dict.fromkeys(on_b, "b")}
        assert all(leases[sid].epoch == 1 for sid in on_a + on_b)  # never claimed again
        assert all(a.is_running(sid) for sid in on_a) and all(b.is_running(sid) for sid in on_b)
        for sid in on_a:
            assert sim.b.events.of(sid, "session_started") == []
        for sid in on_b:
            assert sim.a.events.of(sid, "session_started") == []
        # each turn was asked once, of its own daemon: none aborted, none paid for again
        assert sorted(r.session_id for r in sim.a.model.requests) == sorted(on_a)
        assert sorted(r.session_id for r in sim.b.model.requests) == sorted(on_b)
        assert a.internals.cluster.store_back_at is not None and b.internals.cluster.store_back_at is not None


def test_a_daemon_still_cut_off_after_the_outage_is_swept_once_the_grace_has_passed(pg_url):
    with sim_pair(pg_url, b_proxy=True, cluster={"outage_grace_s": GRACE_S}) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(6)
        sim.store_outage()
        clock.advance_to(90)
        sim.b_proxy.admit()  # the store is back for b only: a is dead for the cluster
        clock.advance_to(200)
        back_at = b.internals.cluster.store_back_at
        assert back_at is not None and 90.0 <= back_at <= 90.0 + SIM_CLUSTER["heartbeat_s"]
        started = sim.b.events.times("session_started", sid)
        # b's first sweep at or after its grace took it (sweeps: every 5 s plus up to 1 s)
        resumes = sweep_resumes_at(back_at, b.internals.cluster.config)
        assert resumes == back_at + SIM_CLUSTER["heartbeat_s"] + GRACE_S
        assert len(started) == 1 and resumes <= started[0] <= resumes + SIM_CLUSTER["sweep_interval_s"] + 1.0
        assert ClusterStore(b.internals.store).owner_of(sid).owner_id == "b"
