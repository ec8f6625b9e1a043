"""The idle exit is a durable timer (issue 36, item 1), in simulated time: two runtimes
("daemons") on one simulated clock and one PostgreSQL. A session waiting for its user on
daemon A ends cleanly ``session_idle_timeout_s`` after its last turn; A's heartbeat stores
that deadline in the lease beside the inactivity deadline. A is cut off from the database;
daemon B takes the session over and ends it at that deadline exactly — not a full idle
timeout after the takeover (it was 07:23:13.5 instead of 07:23:04.3 in the issue)."""

from __future__ import annotations

import pytest

from corvid_actors.db.cluster import ClusterStore
from tests.cluster.conftest import sim_pair

pytestmark = pytest.mark.postgres

MICROSECOND = 1e-6
IDLE_S = 100.0
#: the sim's scripted model runs the conversation loop; give it the direct loop's idle exit
SUPERVISOR = {"session_idle_timeout_s": IDLE_S, "idle_exit_loops": ["conversation"], "session_timeout_s": 600.0}


def test_a_waiting_session_taken_over_exits_idle_at_its_old_owners_deadline(pg_url):
    with sim_pair(pg_url, supervisor=SUPERVISOR) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(20)
        assert a.send_message(sid, "one more")  # its turn ends at 20: the idle exit is due at 120
        clock.advance_to(26)  # the heartbeat at 25 stored it
        lease = ClusterStore(b.internals.store).owner_of(sid)
        assert lease is not None and lease.idle_due_at is not None
        sim.proxy.partition()  # a is gone, for the database and for b
        clock.advance_to(70)  # a's lease expired at 40; b swept it
        assert b.is_running(sid) and sim.b.events.times("session_started", sid)
        assert sim.b.model.requests == []  # it was waiting for its user: no turn
        clock.advance_to(120.0 - MICROSECOND)
        assert b.is_running(sid) and sim.b.events.times("session_exited", sid) == []
        clock.advance_to(120.0 + MICROSECOND)
        assert sim.b.events.times("session_exited", sid) == [pytest.approx(120.0, abs=MICROSECOND)]
        assert not b.is_running(sid)


def test_an_idle_exit_passed_before_the_takeover_ends_the_session_at_once(pg_url):
    with sim_pair(pg_url, supervisor={**SUPERVISOR, "session_idle_timeout_s": 30.0}) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")  # the idle exit is due at 30; the lease runs to 35 at least
        clock.advance_to(21)
        sim.proxy.partition()
        clock.advance_to(29)
        assert a.is_running(sid)  # a keeps it (cut off, not dead) ...
        clock.advance_to(80)
        started = sim.b.events.times("session_started", sid)
        assert len(started) == 1 and started[0] > 30.0  # ... b took it over after the deadline
        assert sim.b.events.times("session_exited", sid) == [started[0]]  # and ended it at once
        assert sim.b.model.requests == [] and not b.is_running(sid)


def test_a_turn_the_heartbeat_did_not_store_moves_the_idle_exit_up_to_its_end(pg_url):
    # the heartbeat at 30 stored 100 (the first turn's); the turn at 31 set 131 and a is cut
    # off before its heartbeat at 35 could store it: b counts from the session's last
    # stored change (that turn's end), as for the inactivity deadline
    with sim_pair(pg_url, supervisor=SUPERVISOR) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(31)
        assert a.send_message(sid, "one more")
        clock.advance_to(33)
        sim.proxy.partition()
        clock.advance_to(131.0 - 0.1)
        assert b.is_running(sid) and sim.b.events.times("session_exited", sid) == []
        clock.advance_to(131.0 + MICROSECOND)
        assert sim.b.events.times("session_exited", sid) == [pytest.approx(131.0, abs=MICROSECOND)]
