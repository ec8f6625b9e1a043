"""The inactivity deadline is a durable timer (issue 20, item 4), in simulated time: two
runtimes ("daemons") on one simulated clock and one PostgreSQL. A session waiting for its
user on daemon A has an inactivity deadline (its last turn's end + the timeout, or what an
extension set); A's heartbeat stores it in the lease. A is cut off from the database;
daemon B takes the session over and ends it at that deadline exactly — the instant A
would have — not a full timeout after the takeover. No real wait but the database's."""

from __future__ import annotations

import pytest

from corvid_actors.testing import EventRecorder, ScriptedProvider, SimClock, Turn, sim_runtime
from corvid_actors.testing.tcp_proxy import TcpProxy

pytestmark = pytest.mark.postgres

MICROSECOND = 1e-6
TIMEOUT_S = 120.0
CLUSTER = {"enabled": True, "heartbeat_s": 5.0, "lease_s": 15.0, "sweep_interval_s": 5.0,
           "sweep_jitter_s": 1.0, "dead_daemon_grace_s": 60.0}


def daemon(name: str, clock: SimClock, url: str) -> tuple[object, ScriptedProvider, EventRecorder]:
    model = ScriptedProvider(clock, default_reply=f"reply from {name}")
    runtime = sim_runtime(clock, model, store_url=url, config={
        "cluster": {**CLUSTER, "daemon_id": name}, "supervisor": {"session_timeout_s": TIMEOUT_S}})
    return runtime, model, EventRecorder.attach(runtime)


def test_a_waiting_session_taken_over_times_out_at_its_old_owners_deadline(pg_url):
    clock = SimClock()
    proxy = TcpProxy("127.0.0.1", 5432).start()
    a, a_model, a_events = daemon("a", clock, proxy.url(pg_url))
    b, b_model, b_events = daemon("b", clock, pg_url)
    try:
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(20)
        assert a.send_message(sid, "one more")  # its turn ends at 20: the deadline is 140
        clock.advance_to(25)
        assert a_events.times("result", sid)[-1] == pytest.approx(20.0, abs=MICROSECOND)
        clock.advance_to(31)  # heartbeats at 25 and 30 stored the deadline
        proxy.cut()
        proxy.refuse()  # a is gone, for the database and for b
        clock.advance_to(70)  # a's lease expired at 45; b swept it
        assert b.is_running(sid) and b_events.times("session_started", sid)
        assert b_model.requests == []  # it was waiting for its user: no turn
        clock.advance_to(140.0 - MICROSECOND)
        assert b.is_running(sid) and b_events.times("session_stopped", sid) == []
        clock.advance_to(140.0 + MICROSECOND)
        assert b_events.times("session_stopped", sid) == [pytest.approx(140.0, abs=MICROSECOND)]
        assert b_events.last("session_stopped", sid).reason == "timeout"
        assert not b.is_running(sid)
    finally:
        proxy.close()
        b.shutdown()
        a.shutdown()
        clock.close()


def test_a_turn_ended_after_the_last_heartbeat_still_sets_the_deadline_taken_over(pg_url):
    # the heartbeat at 30 stored 120 (the first turn's); the turn at 31 set 151, and a is
    # cut off before its heartbeat at 35 could store it: b still ends the session at 151
    clock = SimClock()
    proxy = TcpProxy("127.0.0.1", 5432).start()
    a, _, _ = daemon("a", clock, proxy.url(pg_url))
    b, _, b_events = daemon("b", clock, pg_url)
    try:
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(31)
        assert a.send_message(sid, "one more")
        clock.advance_to(33)
        proxy.cut()
        proxy.refuse()
        clock.advance_to(150.9)
        assert b.is_running(sid) and b_events.times("session_stopped", sid) == []
        clock.advance_to(151.0 + MICROSECOND)
        assert b_events.times("session_stopped", sid) == [pytest.approx(151.0, abs=MICROSECOND)]
    finally:
        proxy.close()
        b.shutdown()
        a.shutdown()
        clock.close()


def test_an_extended_deadline_moves_with_the_session(pg_url):
    clock = SimClock()
    proxy = TcpProxy("127.0.0.1", 5432).start()
    a, _, _ = daemon("a", clock, proxy.url(pg_url))
    b, _, b_events = daemon("b", clock, pg_url)
    try:
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(10)
        assert a.extend_timeout(sid, 300)  # the deadline is now 310, not 120
        clock.advance_to(16)
        proxy.cut()
        proxy.refuse()
        clock.advance_to(309.9)
        assert b.is_running(sid) and b_events.times("session_stopped", sid) == []
        clock.advance_to(310.0 + MICROSECOND)
        assert b_events.times("session_stopped", sid) == [pytest.approx(310.0, abs=MICROSECOND)]
    finally:
        proxy.close()
        b.shutdown()
        a.shutdown()
        clock.close()


def test_a_deadline_passed_before_the_takeover_ends_the_session_at_once(pg_url):
    clock = SimClock()
    proxy = TcpProxy("127.0.0.1", 5432).start()
    a, _, _ = daemon("a", clock, proxy.url(pg_url))
    b, b_model, b_events = daemon("b", clock, pg_url)
    try:
        sid = a.create_session(source="web").id
        b_model.for_session(sid, Turn.reply("never asked"))
        a.start_process(sid, "hi")
        clock.advance_to(110)  # the deadline is 120; the lease runs until 125 at least
        proxy.cut()
        proxy.refuse()
        clock.advance_to(200)
        started = b_events.times("session_started", sid)
        assert len(started) == 1 and started[0] > 120.0  # taken over after the deadline
        assert b_events.times("session_stopped", sid) == [started[0]]  # ... and ended at once
        assert b_events.last("session_stopped", sid).reason == "timeout"
        assert b_model.requests == [] and not b.is_running(sid)
    finally:
        proxy.close()
        b.shutdown()
        a.shutdown()
        clock.close()
