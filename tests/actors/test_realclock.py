"""A small real-clock tier: the real timer thread agrees with the simulated clock."""

from __future__ import annotations

import threading

import pytest

from corvid_actors.clock import RealClock
from corvid_actors.config import Config
from corvid_actors.runtime import Runtime
from corvid_actors.testing import EventRecorder, ScriptedProvider, SimClock

pytestmark = pytest.mark.realclock


def test_real_clock_fires_timers_in_due_order_on_one_thread():
    clock = RealClock()
    fired: list[tuple[str, str]] = []
    done = threading.Event()

    def record(name: str):
        def fn():
            fired.append((name, threading.current_thread().name))
            if len(fired) == 3:
                done.set()
        return fn

    handles = {"c": clock.call_later(0.03, record("c")), "a": clock.call_later(0.01, record("a"))}
    cancelled = clock.call_later(0.015, record("x"))
    handles["b"] = clock.call_later(0.02, record("b"))
    cancelled.cancel()
    assert done.wait(1.0)
    clock.stop()
    # Due order is the order of the due times the clock computed. A test thread descheduled
    # between two call_later calls (a loaded machine) can push "b" past "c": compare with the
    # dues, not with the delays as written; unloaded, that is a, b, c.
    due_order = sorted(handles, key=lambda name: (handles[name].due, handles[name].seq))
    assert [name for name, _ in fired] == due_order
    assert {thread for _, thread in fired} == {"corvid-clock"}


def _crash_twice_scenario(runtime, model) -> list[str]:
    recorder = EventRecorder.attach(runtime)
    session = runtime.create_session(source="chat")
    model.crash("one")
    model.crash("two")
    model.reply("recovered")
    runtime.start_process(session.id, "hi")
    return session.id, recorder


def test_real_clock_restart_backoff_agrees_with_the_simulated_one(tmp_path):
    # Backoff scaled to tens of milliseconds: 20 ms × 3^n.
    cfg = Config().replace(supervisor={"restart_backoff_base_s": 0.02}, providers={"default_provider": "scripted"})
    done = threading.Event()

    sim_clock = SimClock()
    sim_model = ScriptedProvider(sim_clock)
    sim = Runtime(cfg, clock=sim_clock, store_url="sqlite:///:memory:", providers={"scripted": sim_model},
                  workspace_dir=tmp_path)
    try:
        sid, rec = _crash_twice_scenario(sim, sim_model)
        sim_clock.advance(1.0)
        sim_types = [r.type for r in rec.of(sid)]
        sim_starts = rec.times("session_started", sid)
    finally:
        sim.shutdown()
        sim_clock.close()

    real_model = ScriptedProvider()
    real = Runtime(cfg, clock=RealClock(), store_url="sqlite:///:memory:", providers={"scripted": real_model},
                   workspace_dir=tmp_path)
    try:
        sid, rec = _crash_twice_scenario(real, real_model)
        real.subscribe(sid, lambda s, ev: done.set() if ev.type == "assistant" else None)
        assert done.wait(1.0), "the real clock never restarted the session"
        real.settle(1.0)
        real_types = [r.type for r in rec.of(sid)]
        real_restarts = rec.of(sid, "session_restarting")
        real_starts = rec.times("session_started", sid)
    finally:
        real.shutdown()
    assert real_types == sim_types
    assert sim_starts == [0.0, 0.02, 0.08]
    # the supervisor asks the real clock for exactly the simulated backoffs ...
    assert [r.event.delay_s for r in real_restarts] == [0.02, 0.06]
    # ... and the real clock never fires early. Measured from the moment the restart was
    # scheduled, not start to start: the crash handling before it is actor work, not clock
    # time. Lateness is scheduling jitter, which a loaded 2-core machine stretches to 100+ ms:
    # bounded only to catch a clock that ignores the delay (the whole wait is bounded by 1 s).
    for restart, started in zip(real_restarts, real_starts[1:], strict=True):
        waited = started - restart.at
        assert restart.event.delay_s - 0.002 <= waited <= restart.event.delay_s + 0.5, waited
