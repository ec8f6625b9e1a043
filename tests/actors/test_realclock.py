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

    clock.call_later(0.03, record("c"))
    clock.call_later(0.01, record("a"))
    cancelled = clock.call_later(0.015, record("x"))
    clock.call_later(0.02, record("b"))
    cancelled.cancel()
    assert done.wait(1.0)
    clock.stop()
    assert [name for name, _ in fired] == ["a", "b", "c"]
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
        real_starts = rec.times("session_started", sid)
    finally:
        real.shutdown()
    assert real_types == sim_types
    assert sim_starts == [0.0, 0.02, 0.08]
    gaps = [b - a for a, b in zip(real_starts, real_starts[1:], strict=False)]
    # never early; late only by scheduling jitter (2 loaded cores: allow 60 ms)
    assert 0.02 - 0.002 <= gaps[0] <= 0.02 + 0.06
    assert 0.06 - 0.002 <= gaps[1] <= 0.06 + 0.06
