"""Cluster metrics (issue 38 item 2) in simulated time: two daemons on one PostgreSQL.
Daemon A is cut off from the database; B takes its session over once A's lease expired.
B's registry counts the takeover and the lease it now holds; A's shows its heartbeat lagging
and, back again, the session it lost and the write the database refused it."""

from __future__ import annotations

import pytest

from corvid_actors.errors import FencedWrite
from corvid_actors.testing import Turn
from tests.cluster.conftest import sim_pair

pytestmark = pytest.mark.postgres


def figures(runtime):
    return runtime.metrics.read()[1]


def test_leases_takeovers_heartbeat_lag_and_fenced_writes(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        sim.a.model.for_session(sid, Turn.reply("slow answer", latency_s=120))
        a.start_process(sid, "hi")
        clock.advance(1)
        assert figures(a)["corvid_cluster_leases_held"] == 1
        assert figures(a)["corvid_cluster_heartbeat_age_seconds"] <= 5
        assert figures(b)["corvid_cluster_leases_held"] == 0
        clock.advance_to(10)
        sim.proxy.partition()  # a is gone, for the database and for b
        clock.advance_to(60)  # a's lease expired; b swept and took the session
        assert b.is_running(sid)
        after = figures(b)
        assert after["corvid_cluster_takeovers_total"] == 1 and after["corvid_cluster_leases_held"] == 1
        assert figures(a)["corvid_cluster_heartbeat_age_seconds"] >= 50  # no heartbeat since 10 s
        sim.proxy.admit()
        clock.advance_to(130)  # a's stream ends (120 s latency): its stale writes are refused
        back = figures(a)
        assert back["corvid_cluster_sessions_lost_total"] == 1
        assert back["corvid_cluster_leases_held"] == 0
        assert back["corvid_cluster_heartbeat_age_seconds"] <= 5
        assert back["corvid_store_replays_total"] >= 1  # the connection lost under the partition
        assert back["corvid_store_available"] == 1
        assert back["corvid_store_fenced_writes_total"] == 0
        with pytest.raises(FencedWrite):  # a late write of a's stale incarnation
            a.internals.store.open_turn(sid, total_turns=1)
        assert figures(a)["corvid_store_fenced_writes_total"] == 1


def test_a_store_outage_leaves_the_other_figures_served(pg_url):
    with sim_pair(pg_url) as sim:
        a = sim.a.runtime
        a.start_process(a.create_session(source="web").id, "hi")
        sim.clock.advance(1)
        assert figures(a)['corvid_sessions{status="running"}'] == 1
        sim.proxy.partition()
        sim.clock.advance(1)
        stats, cut_off = a.metrics.read()
        assert stats["sessions_by_status"] is None and cut_off["corvid_store_available"] == 0
        assert not any(key.startswith("corvid_sessions{") for key in cut_off)
        assert cut_off['corvid_live_sessions{state="running"}'] == 1
