"""Where a session ran (issue 36 item 8), in simulated time: two runtimes ("daemons") on one
simulated clock and one PostgreSQL. A failover and a drain each leave the rows they should
— daemon, epoch, from, until, why it came and went — at the simulated instants the leases
changed hands, and ``admin session`` shows them (JSON and the table)."""

from __future__ import annotations

import io
import random
from datetime import datetime, timedelta
from typing import Any

import pytest

from corvid_actors.actors.admin import AdminActor, AdminCommand, AdminWiring, Ready
from corvid_actors.actors.admin._cluster import ClusterRouter
from corvid_actors.daemon.render import show_result
from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.pg_bus import PgBus
from tests.cluster.conftest import SIM_CLUSTER, sim_pair

pytestmark = pytest.mark.postgres

MICROSECOND = 1e-6


def sweep_times(daemon_id: str, until: float) -> list[float]:
    """When the ClusterMember of ``daemon_id`` sweeps (simulated seconds): its jitter comes
    from a generator seeded with its id (actors/cluster/_member.py), so the instants are known."""
    rng = random.Random(daemon_id)
    at, out = rng.uniform(0.0, SIM_CLUSTER["sweep_jitter_s"]), []
    while at <= until:
        out.append(at)
        at += SIM_CLUSTER["sweep_interval_s"] + rng.uniform(0.0, SIM_CLUSTER["sweep_jitter_s"])
    return out


def first_sweep_from(daemon_id: str, moment: float) -> float:
    return next(t for t in sweep_times(daemon_id, moment + 10.0) if t >= moment)


def history(runtime: Any, sid: str, t0: datetime) -> list[tuple[Any, ...]]:
    """The session's rows with times as simulated seconds since ``t0``."""
    def seconds(moment: datetime | None) -> float | None:
        return None if moment is None else (moment - t0).total_seconds()

    return [(o.daemon_id, o.epoch, seconds(o.since), seconds(o.until), o.reason_in, o.reason_out)
            for o in ClusterStore(runtime.internals.store).ownership(sid)]


def approx(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(pytest.approx(v, abs=MICROSECOND) if isinstance(v, float) else v for v in row) for row in rows]


def test_a_failover_closes_the_dead_owners_row_when_the_survivor_takes_the_session(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        t0 = clock.now()
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(12)  # a's last heartbeat: 10 s, so its lease expires at 25 s
        sim.proxy.partition()
        clock.advance_to(40)
        taken_at = first_sweep_from("b", 25.0)
        assert b.is_running(sid)
        assert history(b, sid, t0) == approx([("a", 1, 0.0, taken_at, "start", "failover"),
                                              ("b", 2, taken_at, None, "failover", None)])
        assert sim.b.model.requests == []  # it was waiting for its user: the move cost no turn


def test_a_drain_hands_the_session_over_and_the_new_owner_says_it_came_by_drain(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        t0 = clock.now()
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(20)
        a.shutdown("drain")  # the daemon's drain ends in this shutdown: every lease released
        clock.advance_to(40)
        taken_at = first_sweep_from("b", 20.0)
        assert b.is_running(sid)
        assert history(b, sid, t0) == approx([("a", 1, 0.0, 20.0, "start", "drain"),
                                              ("b", 2, taken_at, None, "drain", None)])
        assert sim.b.model.requests == []
        b.stop_process(sid, "user_stop")
        b.settle()
        assert history(b, sid, t0)[-1] == approx([("b", 2, taken_at, 40.0, "drain", "stop")])[0]


def test_admin_session_shows_where_the_session_ran(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        t0 = clock.now()
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(20)
        a.shutdown("drain")
        clock.advance_to(40)
        seat, internals = b.internals.cluster, b.internals
        bus = PgBus(pg_url, "b", clock=b.clock, on_command=lambda *_: None, on_events=lambda *_: None)  # not started
        admin = AdminActor.start(internals.tracker, AdminWiring(
            supervisor=internals.supervisor, approvals=internals.approvals, bus=internals.bus, timers=internals.timers,
            slot_pool=internals.slot_pool, credits=internals.credits, store=internals.store,
            providers=internals.providers, clock=b.clock, router=ClusterRouter(seat, bus, 5.0, 1.0)))
        try:
            assert admin.ask(Ready()) is True
            detail = admin.ask(AdminCommand("session", {"session": sid}))
        finally:
            admin.stop()
        assert (detail["owner"], detail["answered_by"]) == ("b", "b")
        taken = detail["ownership"][1]["since"]
        assert [(o["daemon"], o["epoch"], o["reason_in"], o["reason_out"]) for o in detail["ownership"]] == [
            ("a", 1, "start", "drain"), ("b", 2, "drain", None)]
        assert detail["ownership"][0]["until"] == (t0 + timedelta(seconds=20)).isoformat()
        shown = io.StringIO()
        show_result("session", detail, shown)
        text = shown.getvalue()
        table = text[text.index("where it ran:"):text.index("recent messages:")].splitlines()
        assert table[1].split() == ["DAEMON", "EPOCH", "SINCE", "UNTIL", "CAME", "(WHY)", "WENT", "(WHY)"]
        assert table[2].split()[:2] == ["a", "1"] and table[2].split()[-2:] == ["start", "drain"]
        assert table[3].split()[:2] == ["b", "2"] and table[3].split()[-3:] == ["now", "drain", "-"]
        assert taken[:19] + "Z" in table[3]
