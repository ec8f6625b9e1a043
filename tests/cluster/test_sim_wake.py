"""A woken daemon stops its old sessions at once (issue 36, item 5), in simulated time: two
runtimes ("daemons") on one simulated clock and one PostgreSQL. Daemon A is cut off past
its lease (as a ``SIGSTOP`` would leave it), B takes its session over, and A is back
between two of its heartbeats. The first event A's stale incarnation tries to publish
(dropped: A's leases are not known to be its own) makes A renew at once, so the session
taken from it is stopped at that instant, not at A's next heartbeat; the admin's check
(``confirm_leases``) does the same before it answers."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import SIM_CLUSTER, sim_pair, wait_for

pytestmark = pytest.mark.postgres

#: a's heartbeats run every 5 s from its start: back at 41, its next one is at 45
BACK_AT = 41.0


def taken_over(sim, sid: str) -> None:
    clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
    a.start_process(sid, "hi")
    clock.advance_to(1)
    sim.proxy.partition()  # a is gone for the database and for b (its last heartbeat: 0)
    clock.advance_to(BACK_AT)  # b swept a's expired lease
    assert b.is_running(sid) and a.is_running(sid)  # a has not heard yet
    sim.proxy.admit()
    assert not a.internals.cluster.lease_valid()


@pytest.mark.parametrize("check", ["a dropped event", "the admin's confirm_leases"])
def test_a_woken_daemon_stops_a_session_taken_from_it_before_its_next_heartbeat(pg_url, check):
    with sim_pair(pg_url) as sim:
        a = sim.a.runtime
        seat = a.internals.cluster
        sid = a.create_session(source="web").id
        taken_over(sim, sid)
        if check == "a dropped event":
            assert seat.may_publish() is False  # the event is dropped, a renewal told
        else:
            assert seat.confirm_leases() is True  # renewed: the leases left are surely a's
        # no simulated time passes: a renewed at once, found the session gone, stopped it
        a.settle()
        wait_for(lambda: not a.is_running(sid) and not seat.owns(sid), "a stopped its stale incarnation")
        assert sim.clock.monotonic() == BACK_AT < BACK_AT + SIM_CLUSTER["heartbeat_s"]
        assert seat.lease_valid() and sim.a.events.times("session_stopped", sid) == []  # silently
