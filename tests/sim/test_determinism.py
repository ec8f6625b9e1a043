"""The same simulation gives the same event log; a simulated day of 100 sessions runs."""

from __future__ import annotations

import random

from corvid_actors.config import Config
from corvid_actors.testing import EventRecorder, ScriptedProvider, SimClock, sim_runtime

HOUR = 3600.0


def run_day(n_sessions: int, hours: float, seed: int, dispatcher: str = "inline",
            explore_seed: int | None = None, config: Config | None = None) -> tuple[list[dict], dict]:
    """n chat sessions chatting over ``hours``, with crashes and outages drawn from ``seed``
    (``dispatcher``: how the actors run; ``explore_seed``: explore interleavings with that
    seed — see ``sim_runtime``; ``config``: default ``Config()``)."""
    rng = random.Random(seed)
    clock = SimClock()
    model = ScriptedProvider(clock, default_reply="fine")
    model.health_results = [False, True] * 1000
    runtime = sim_runtime(clock, model, config=config or Config(), dispatcher=dispatcher,  # type: ignore[arg-type]
                          seed=explore_seed, explore=explore_seed is not None)
    recorder = EventRecorder.attach(runtime)
    try:
        sessions = [runtime.create_session(source="chat", name=f"s{i}", session_id=f"session-{i:04d}")
                    for i in range(n_sessions)]
        for i, s in enumerate(sessions):
            for turn in range(3):
                roll = rng.random()
                tag = f"[{s.id} t{turn}]"
                if roll < 0.15:
                    model.crash("boom", match=tag, latency_s=rng.uniform(1, 30))
                elif roll < 0.25:
                    model.outage("503", match=tag, latency_s=rng.uniform(1, 30))
                else:
                    model.reply(f"answer {i}.{turn}", deltas=2, latency_s=rng.uniform(1, 30), match=tag)
        schedule = sorted((rng.uniform(0, hours * HOUR), s.id, turn)
                          for s in sessions for turn in range(3))
        for at, sid, turn in schedule:
            clock.advance_to(at)
            text = f"[{sid} t{turn}] hello"
            if not runtime.send_message(sid, text):
                runtime.resume_process(sid, text)
        clock.advance_to(hours * HOUR + HOUR)  # let the last conversations finish
        final = {s.id: runtime.internals.store.get_session(s.id).status for s in sessions}
        return recorder.log(), final
    finally:
        runtime.shutdown()
        clock.close()


def test_same_simulation_twice_gives_identical_event_logs():
    first_log, first_final = run_day(10, 2, seed=7)
    second_log, second_final = run_day(10, 2, seed=7)
    assert len(first_log) > 100
    assert first_log == second_log
    assert first_final == second_final


def test_a_simulated_day_of_100_sessions_with_crashes_and_outages():
    log, final = run_day(100, 24, seed=42)
    types = {entry["type"] for entry in log}
    assert {"session_started", "session_exited", "session_restarting", "session_paused",
            "session_resumed", "assistant"} <= types
    # every session ends the day in a defined, non-running state (idle sessions exit after 5 min)
    assert set(final.values()) <= {"idle", "error", "paused", "stopped"}
    # nothing is published for a session incarnation after its end
    by_session: dict[str, list[str]] = {}
    for entry in log:
        by_session.setdefault(entry["session"], []).append(entry["type"])
    for types_ in by_session.values():
        assert types_[0] == "session_started"
