"""Benchmark 4 — control latency: ``stop_process`` mid-stream → ``session_stopped`` delivered.

``ACTIVE + STOPS`` sessions stream long, slow replies from the stub (in its own process);
then ``STOPS`` of them, picked at random (seeded), are stopped one at a time, a random
few milliseconds apart, so at least ``ACTIVE`` sessions are streaming throughout. For
each stop: the time from calling ``stop_process`` to the subscriber receiving
``session_stopped`` (and, separately, to ``stop_process`` returning).

Each stop of a streaming session is paired with the stop of one of ``STOPS`` idle live
sessions of the same runtime (answered, waiting for a message), in a seeded random order
(``bench._paired``): the paired ratio is what being mid-stream adds to a stop at the same
load. (CPU time there is mostly the streams': the wall time is the figure.)

    python -m bench.control [--quick] [--active N] [--stops N] [--delays 1 0.2]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
from pathlib import Path
from typing import Any

from bench._common import cli, loadavg, machine, now, percentile, quiet_logs
from bench._paired import Outcome, compare, cpu_seconds, interleave
from bench._runtime import Waiter, create_sessions, real_runtime
from bench._stub_proc import StubProcess, prompt

ACTIVE = 1000
STOPS = 200
#: seconds between chunks of each stream: 1 chunk/s per session (what the process sustains
#: with 1,200 streams); 5 chunks/s (beyond it: every thread is runnable) is opt-in:
#: ``--delays 1 0.2``
DELAYS_S = (1.0,)
#: a stream must outlast the start-up of all sessions and the stops (~2 min at 1,200)
STREAM_S = 240.0
PAUSE_RANGE_S = (0.01, 0.05)
GOAL_P99_MS = 50.0
SEED = 4


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    active, stops = (200, 50) if args.quick else (args.active, args.stops)
    delays = tuple(args.delays) if args.delays else DELAYS_S
    runs = [measure(active, stops, delay) for delay in delays]
    p99 = runs[0]["delivered_ms"]["p99"]
    return {
        "name": "control", "machine": machine(), "load_before": runs[0]["load_before"],
        "load_after": runs[0]["load_after"], "runs": runs, "paired": [r["paired"] for r in runs],
        "goal": f"p99 ≤ {GOAL_P99_MS:g} ms with {active} streaming sessions ({1 / delays[0]:g} chunk/s each)",
        "met": p99 <= GOAL_P99_MS, "command": ".venv/bin/python -m bench.control",
    }


def measure(active: int, stops: int, delay_s: float) -> dict[str, Any]:
    """Stop ``stops`` of ``active + stops`` sessions streaming one chunk every ``delay_s``,
    paired with stops of ``stops`` idle live sessions at the same moment."""
    rng = random.Random(SEED)
    waiter = Waiter()
    stopped_at: dict[str, float] = {}
    lock = threading.Lock()

    def on_event(sid: str, event: Any) -> None:
        if event.type == "session_stopped":
            with lock:
                stopped_at[sid] = now()
        waiter.bump(event.type)

    load_before = loadavg()
    with StubProcess() as url, tempfile.TemporaryDirectory() as tmp:
        runtime = real_runtime(url, Path(tmp), max_parallel=active + 2 * stops)
        try:
            sids = create_sessions(runtime, Path(tmp), active + 2 * stops)
            idle, streaming = sids[:stops], sids[stops:]
            runtime.subscribe_all(on_event)
            for sid in idle:  # a one-chunk reply: then live, waiting for a message
                runtime.start_process(sid, prompt(1))
            assert waiter.wait("result", len(idle), 600), "the idle sessions did not answer"
            for sid in streaming:
                runtime.start_process(sid, prompt(round(STREAM_S / delay_s), delay_s))
            # every session has its first chunk: all are mid-stream
            assert waiter.wait("content_block_delta", len(idle) + len(streaming) * 2, 600), "streams did not start"
            streaming_at_first_stop = len(runtime.get_active_session_ids()) - len(idle)
            deltas_before = waiter.counts.get("content_block_delta", 0)
            t_window = now()
            victims = {"streaming": iter(rng.sample(streaming, stops)), "idle": iter(idle)}

            def stop(kind: str) -> Outcome:
                sid = next(victims[kind])
                threading.Event().wait(rng.uniform(*PAUSE_RANGE_S))
                stopped = waiter.counts.get("session_stopped", 0)
                cpu0, t0 = cpu_seconds(), now()
                runtime.stop_process(sid)
                call_ms = (now() - t0) * 1e3
                assert waiter.wait("session_stopped", stopped + 1, 30), "session_stopped never came"
                cpu = cpu_seconds() - cpu0
                with lock:
                    delivered = stopped_at[sid] - t0
                return Outcome(1, {"delivered_ms": delivered * 1e3, "call_ms": call_ms}, wall_s=delivered, cpu_s=cpu)

            trials = interleave({"idle": lambda: stop("idle"), "streaming": lambda: stop("streaming")},
                                trials=stops, warmup=0, seed=SEED)
            window_s = now() - t_window
            deltas_during = waiter.counts.get("content_block_delta", 0) - deltas_before
            still_streaming = len(runtime.get_active_session_ids())
        finally:
            runtime.shutdown(settle_timeout_s=120)
    delivered = [t.extra["delivered_ms"] for t in trials["streaming"]]
    returned = [t.extra["call_ms"] for t in trials["streaming"]]
    idle_ms = [t.extra["delivered_ms"] for t in trials["idle"]]
    return {
        "delay_s": delay_s, "load_before": load_before, "load_after": loadavg(),
        "sessions": active + stops, "idle_sessions": stops, "stops": stops,
        "streaming_at_first_stop": streaming_at_first_stop, "streaming_after_last_stop": still_streaming,
        "delivered_ms": {"p50": round(percentile(delivered, 50), 1), "p90": round(percentile(delivered, 90), 1),
                         "p99": round(percentile(delivered, 99), 1), "max": round(max(delivered), 1)},
        "idle_delivered_ms": {"p50": round(percentile(idle_ms, 50), 1), "p99": round(percentile(idle_ms, 99), 1)},
        "stop_call_ms": {"p50": round(percentile(returned, 50), 1), "p99": round(percentile(returned, 99), 1)},
        "deltas_per_s_during_stops": round(deltas_during / window_s),
        "offered_chunks_per_s": round((active + stops) / delay_s),
        "paired": compare(trials, "idle", "streaming", kind="cost", digits=2,
                          label=f"stop → session_stopped: mid-stream / idle session ({1 / delay_s:g} chunk/s streams)"),
    }


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--active", type=int, default=ACTIVE, help=f"sessions streaming throughout (default {ACTIVE})")
    parser.add_argument("--stops", type=int, default=STOPS, help=f"stops of each kind (default {STOPS})")
    parser.add_argument("--delays", type=float, nargs="*",
                        help=f"seconds between chunks, one run each (default {' '.join(map(str, DELAYS_S))})")


if __name__ == "__main__":
    cli(run, _flags)
