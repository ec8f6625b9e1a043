"""Rebalancing (issue 36 item 7), in simulated time: two runtimes ("daemons") on one
simulated clock and one PostgreSQL. Daemon A holds ten sessions waiting for their users,
B holds none: a rebalance on A offers B five of them, B's sweeps take them, and nothing
calls a model for the move; a session mid-turn stays where it is. With
``rebalance_on_join``, a daemon that joins gets its share without anyone asking."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from corvid_actors.actors.admin import AdminActor, AdminCommand, AdminWiring, Ready
from corvid_actors.actors.admin._cluster import ClusterRouter
from corvid_actors.actors.cluster import Rebalance
from corvid_actors.daemon.render import show_result
from corvid_actors.db.balance import rebalance_moves
from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.pg_bus import PgBus
from corvid_actors.testing import EventRecorder, ScriptedProvider, SimClock, Turn, sim_runtime
from tests.cluster.conftest import SIM_CLUSTER, SimDaemon, sim_pair
from tests.cluster.test_sim_ownership import first_sweep_from, sweep_times

pytestmark = pytest.mark.postgres

MICROSECOND = 1e-6


@pytest.mark.parametrize(("load", "me", "movable", "moves"), [
    ({"a": 10, "b": 0}, "a", 10, {"b": 5}),
    ({"a": 33, "b": 27}, "a", 33, {"b": 3}),
    ({"a": 10, "b": 0, "c": 0}, "a", 10, {"b": 3, "c": 3}),
    ({"a": 10, "b": 0}, "a", 2, {"b": 2}),  # only the idle ones move
    ({"a": 6, "b": 5}, "a", 6, {}),  # within the bound
    ({"a": 0, "b": 10}, "a", 0, {}),  # the lighter one gives nothing
    ({"a": 10}, "a", 10, {}),  # alone
])
def test_how_many_sessions_move_and_where(load, me, movable, moves):
    assert rebalance_moves(load, me, 1, movable) == moves


def test_a_tolerance_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        rebalance_moves({"a": 1, "b": 0}, "a", 0, 1)


def waiting_sessions(daemon: SimDaemon, count: int) -> list[str]:
    """``count`` sessions started on ``daemon``, each answered once and now waiting for its user."""
    runtime = daemon.runtime
    sids = [runtime.create_session(source="web").id for _ in range(count)]
    for sid in sids:
        runtime.start_process(sid, "hi")
    return sids


def owners(runtime: Any, sids: list[str]) -> dict[str, str | None]:
    return {lease.session_id: lease.owner_id for lease in ClusterStore(runtime.internals.store).leases(sids)}


def test_a_rebalance_moves_idle_sessions_to_the_empty_daemon_without_a_model_turn(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        t0 = clock.now()
        idle = waiting_sessions(sim.a, 9)
        busy = a.create_session(source="web").id
        sim.a.model.for_session(busy, Turn.reply("a long answer", latency_s=100.0))
        a.start_process(busy, "think hard")
        clock.advance_to(2)
        assert a.session_info(busy)[busy]["in_turn"] is True
        asked = len(sim.a.model.requests)
        assert asked == 10

        result = a.internals.supervisor.ask(Rebalance())
        assert result["load"] == {"a": 10, "b": 0}
        moved = result["moved"]["b"]
        assert len(moved) == 5 and set(moved) <= set(idle) and result["kept_busy"] == 0
        clock.advance_to(20)  # b's sweeps took them (at most its fair share, 4, per sweep)
        assert {sid for sid, owner in owners(a, idle + [busy]).items() if owner == "b"} == set(moved)
        assert all(b.is_running(sid) for sid in moved) and not any(a.is_running(sid) for sid in moved)
        assert a.is_running(busy) and a.session_info(busy)[busy]["in_turn"] is True  # mid-turn: not moved
        assert sim.b.model.requests == [] and len(sim.a.model.requests) == asked  # the move cost no turn
        assert [e.event.reason for e in sim.a.events.of(moved[0], "session_stopped")] == ["rebalance"]
        taken = sweep_times("b", 20.0)
        for sid in moved:
            rows = ClusterStore(b.internals.store).ownership(sid)
            assert [(o.daemon_id, o.epoch, o.reason_in, o.reason_out) for o in rows] == [
                ("a", 1, "start", "rebalance"), ("b", 2, "rebalance", None)]
            assert (rows[0].until - t0).total_seconds() == pytest.approx(2.0, abs=MICROSECOND)
            assert any(abs((rows[1].since - t0).total_seconds() - t) < MICROSECOND for t in taken)
        # balanced now: a second rebalance moves nothing
        assert a.internals.supervisor.ask(Rebalance())["moved"] == {}


@contextmanager
def late_joiner(clock: SimClock, url: str, name: str, cluster: dict[str, Any]) -> Iterator[SimDaemon]:
    model = ScriptedProvider(clock, default_reply=f"reply from {name}")
    runtime = sim_runtime(clock, model, config={"cluster": {**SIM_CLUSTER, **cluster, "daemon_id": name}},
                          store_url=url)
    try:
        yield SimDaemon(runtime, model, EventRecorder.attach(runtime))
    finally:
        runtime.shutdown()


def test_a_daemon_that_joins_gets_its_share_when_rebalance_on_join_is_on(pg_url):
    on_join = {"rebalance_on_join": True}
    with sim_pair(pg_url, cluster=on_join) as sim:
        clock, a = sim.clock, sim.a.runtime
        sim.b.runtime.shutdown()  # b leaves: a alone holds the sessions
        sids = waiting_sessions(sim.a, 10)
        clock.advance_to(30)
        assert set(owners(a, sids).values()) == {"a"}
        with late_joiner(clock, pg_url, "c", on_join) as c:
            joined_at = clock.monotonic()
            clock.advance_to(joined_at + 30)
            on_c = [sid for sid, owner in owners(a, sids).items() if owner == "c"]
            assert len(on_c) == 5 and all(c.runtime.is_running(sid) for sid in on_c)
            assert c.model.requests == [] and len(sim.a.model.requests) == 10
            noticed = first_sweep_from("a", joined_at)  # a's next sweep saw c arrive
            for sid in on_c:
                [_, mine] = ClusterStore(a.internals.store).ownership(sid)[-2:]
                assert (mine.daemon_id, mine.reason_in) == ("c", "rebalance")
            assert {round(t, 6) for t in sim.a.events.times("session_stopped")} == {round(noticed, 6)}


def test_admin_rebalance_runs_the_chosen_daemons_part_and_says_what_moved(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a = sim.clock, sim.a.runtime
        waiting_sessions(sim.a, 4)
        clock.advance_to(2)
        internals = a.internals
        bus = PgBus(pg_url, "a", clock=a.clock, on_command=lambda *_: None, on_events=lambda *_: None)  # not started
        admin = AdminActor.start(internals.tracker, AdminWiring(
            supervisor=internals.supervisor, approvals=internals.approvals, bus=internals.bus, timers=internals.timers,
            slot_pool=internals.slot_pool, credits=internals.credits, store=internals.store,
            providers=internals.providers, clock=a.clock, router=ClusterRouter(internals.cluster, bus, 5.0, 1.0)))
        try:
            assert admin.ask(Ready()) is True
            result = admin.ask(AdminCommand("rebalance", {"daemon": "a"})).get(timeout=10.0)
        finally:
            admin.stop()
        [mine] = result["daemons"]
        assert (result["moved"], mine["daemon_id"], mine["load"]) == (2, "a", {"a": 4, "b": 0})
        assert [len(sids) for sids in mine["moved"].values()] == [2] and list(mine["moved"]) == ["b"]
        shown = io.StringIO()
        show_result("rebalance", result, shown)
        assert shown.getvalue() == "moved 2 idle session(s)\n  a: 2 to b\n"
