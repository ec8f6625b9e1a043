"""Benchmark 5 — simulated time: simulated hours per wall second, 100 sessions with faults.

The scenario is ``run_day`` of ``tests/sim/test_determinism.py``: chat sessions on a
SimClock, three user turns each at random times, 15 % of model calls crashing (backoff
restarts) and 10 % outages (pause, health probe, auto-resume). The same 300 turns are
spread over 24 h and over 240 h: the second run shows what quiet hours cost.

    python -m bench.simtime [--quick]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench._common import cli, loadavg, machine, median, quiet_logs

GOAL_HOURS_PER_S = 1000.0
SEED = 42
REPEATS = 3


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    from tests.sim.test_determinism import run_day

    sessions = 20 if args.quick else 100
    load_before = loadavg()
    rows = []
    for hours in (24.0, 240.0):
        walls, events = [], 0
        for _ in range(1 if args.quick else REPEATS):
            t0 = time.perf_counter()
            log, final = run_day(sessions, hours, seed=SEED)
            walls.append(time.perf_counter() - t0)
            events = len(log)
        simulated_h = hours + 1  # run_day runs one more hour to let the last turns finish
        wall = median(walls)
        rows.append({"hours": hours, "sessions": sessions, "wall_s": round(wall, 3), "events": events,
                     "simulated_hours_per_s": round(simulated_h / wall, 1),
                     "wall_ms_per_simulated_hour": round(wall / simulated_h * 1e3, 2)})
    best = rows[0]["simulated_hours_per_s"]
    return {
        "name": "simtime", "machine": machine(), "load_before": load_before, "runs": rows,
        "goal": f"≥ {GOAL_HOURS_PER_S:g} simulated hours per wall second (100 sessions, 24 h)",
        "met": best >= GOAL_HOURS_PER_S,
        "command": ".venv/bin/python -m bench.simtime",
    }


if __name__ == "__main__":
    cli(run)
