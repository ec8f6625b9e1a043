"""The inactivity deadline is a durable timer (issue 20, item 4), in simulated time: two
runtimes ("daemons") on one simulated clock and one PostgreSQL. A session waiting for its
user on daemon A has an inactivity deadline (its last turn's end + the timeout, or what an
extension set); A's heartbeat stores it in the lease. A is cut off from the database;
daemon B takes the session over and ends it at that deadline exactly — the instant A
would have — not a full timeout after the takeover. No real wait but the database's."""

from __future__ import annotations

import pytest

from corvid_actors.testing import Turn
from tests.cluster.conftest import sim_pair

pytestmark = pytest.mark.postgres

MICROSECOND = 1e-6
TIMEOUT_S = 120.0
SUPERVISOR = {"session_timeout_s": TIMEOUT_S}


def test_a_waiting_session_taken_over_times_out_at_its_old_owners_deadline(pg_url):
    with sim_pair(pg_url, supervisor=SUPERVISOR) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(20)
        assert a.send_message(sid, "one more")  # its turn ends at 20: the deadline is 140
        clock.advance_to(25)
        assert sim.a.events.times("result", sid)[-1] == pytest.approx(20.0, abs=MICROSECOND)
        clock.advance_to(31)  # heartbeats at 25 and 30 stored the deadline
        sim.proxy.partition()  # a is gone, for the database and for b
        clock.advance_to(70)  # a's lease expired at 45; b swept it
        assert b.is_running(sid) and sim.b.events.times("session_started", sid)
        assert sim.b.model.requests == []  # it was waiting for its user: no turn
        clock.advance_to(140.0 - MICROSECOND)
        assert b.is_running(sid) and sim.b.events.times("session_stopped", sid) == []
        clock.advance_to(140.0 + MICROSECOND)
        assert sim.b.events.times("session_stopped", sid) == [pytest.approx(140.0, abs=MICROSECOND)]
        assert sim.b.events.last("session_stopped", sid).reason == "timeout"
        assert not b.is_running(sid)


@pytest.mark.parametrize(("script", "cut_at", "deadline"), [
    # the heartbeat at 30 stored 120 (the first turn's); the turn at 31 set 151, and a is
    # cut off before its heartbeat at 35 could store it: b still ends the session at 151
    ((("send", 31),), 33, 151.0),
    # an extension at 10: the deadline is 310, not 120, and moves with the session
    ((("extend", 10),), 16, 310.0),
])
def test_the_deadline_taken_over_is_the_last_one_the_old_owner_set(pg_url, script, cut_at, deadline):
    with sim_pair(pg_url, supervisor=SUPERVISOR) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        for action, at in script:
            clock.advance_to(at)
            assert a.send_message(sid, "one more") if action == "send" else a.extend_timeout(sid, 300)
        clock.advance_to(cut_at)
        sim.proxy.partition()
        clock.advance_to(deadline - 0.1)
        assert b.is_running(sid) and sim.b.events.times("session_stopped", sid) == []
        clock.advance_to(deadline + MICROSECOND)
        assert sim.b.events.times("session_stopped", sid) == [pytest.approx(deadline, abs=MICROSECOND)]


def test_a_deadline_passed_before_the_takeover_ends_the_session_at_once(pg_url):
    with sim_pair(pg_url, supervisor=SUPERVISOR) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        sim.b.model.for_session(sid, Turn.reply("never asked"))
        a.start_process(sid, "hi")
        clock.advance_to(110)  # the deadline is 120; the lease runs until 125 at least
        sim.proxy.partition()
        clock.advance_to(200)
        started = sim.b.events.times("session_started", sid)
        assert len(started) == 1 and started[0] > 120.0  # taken over after the deadline
        assert sim.b.events.times("session_stopped", sid) == [started[0]]  # ... and ended at once
        assert sim.b.events.last("session_stopped", sid).reason == "timeout"
        assert sim.b.model.requests == [] and not b.is_running(sid)
