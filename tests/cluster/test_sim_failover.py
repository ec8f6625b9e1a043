"""Durable timers in simulated time (issue 20, item 4): two runtimes ("daemons") on one
simulated clock and one PostgreSQL. A session paused by an outage on daemon A is due for
its auto-resume at 300 s; A is cut off from the database at 10 s; daemon B claims the
session once A's lease has expired and resumes it at 300 s exactly — the instant A would
have — not at the takeover. The whole scenario is simulated: no real wait but the
database round trips."""

from __future__ import annotations

from typing import Any

import pytest

from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.store import Store
from corvid_actors.errors import StoreError
from corvid_actors.testing import Turn
from tests.cluster.conftest import sim_pair

pytestmark = pytest.mark.postgres

MICROSECOND = 1e-6


def test_an_outage_resume_due_on_a_dead_daemon_happens_at_that_instant_on_another(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        sim.a.model.for_session(sid, Turn.outage("503"))
        sim.b.model.for_session(sid, Turn.reply("back again"))
        a.start_process(sid, "hi")
        clock.advance(1)
        assert a.is_paused(sid) and sim.a.events.last("session_paused", sid).resume_at
        clock.advance_to(10)
        sim.proxy.partition()  # a is gone, for the database and for b
        clock.advance_to(60)  # a's lease (15 s past its last heartbeat) expired; b swept
        assert b.is_paused(sid) and not b.is_running(sid)
        assert sim.b.model.health_probes == 0
        clock.advance_to(299.9)
        assert b.is_paused(sid) and sim.b.model.health_probes == 0
        # the lease holds the due time to the microsecond (PostgreSQL's precision)
        clock.advance_to(300.0 + MICROSECOND)
        assert sim.b.events.times("session_resumed", sid) == [pytest.approx(300.0, abs=MICROSECOND)]
        assert sim.b.model.health_probes == 1 and b.is_running(sid)
        assert sim.b.events.last("result", sid) is not None
        assert [r.session_id for r in sim.b.model.requests] == [sid]  # the interrupted turn, once


class FailsOnce(Store):
    """A store whose first ``require_session`` of ``fail_for`` raises (a connection lost
    mid-adoption)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.fail_for: str | None = None

    def require_session(self, session_id: str) -> Any:
        if session_id == self.fail_for:
            self.fail_for = None
            raise StoreError("injected: the connection was lost")
        return super().require_session(session_id)


def test_a_session_whose_adoption_failed_is_handed_over_not_kept_leased(pg_url):
    # The sweep claimed it, the resume failed: the lease is released for the next sweep,
    # not renewed by this daemon's heartbeats with nothing running.
    b_store = FailsOnce(pg_url)
    with sim_pair(pg_url, b_store=b_store) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance(1)
        assert a.is_running(sid)
        b_store.fail_for = sid
        sim.proxy.partition()
        clock.advance_to(60)  # a's lease expired; b claimed it, failed once, released, claimed again
        assert b_store.fail_for is None  # the failure happened
        assert b.is_running(sid)
        assert len(sim.b.events.of(sid, "session_started")) == 1
        lease = ClusterStore(b_store).owner_of(sid)
        assert lease is not None and lease.owner_id == "b" and lease.epoch == 3  # a's 1, b's failed 2, b's 3
        assert sim.b.model.requests == []  # it was waiting for its user: no turn
