"""Benchmark (issue 16) — the supervisor's share of thread CPU in the simulated day.

Runs ``run_day`` of ``tests/sim/test_determinism.py`` (100 chat sessions, 24 h, crashes
and outages — most messages there find their session exited and cold-start it), then
:func:`warm_day` (the same sessions kept warm: the hot send path alone) and reads, just before the runtime shuts down, the CPU time of the
SessionSupervisor's thread (``/proc/self/task/<tid>/stat``) against the CPU time of the
whole process over the run (``resource.getrusage``, every thread, also ended ones).

Run it against the code before the change too, side by side:

    python -m bench.supervisor_share [--quick]
    git archive <before> | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before python bench/supervisor_share.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file against another checkout (PYTHONPATH first)
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from bench._common import cli, loadavg, machine, quiet_logs  # noqa: E402

SEED = 42
_TICK = os.sysconf("SC_CLK_TCK")


def _thread_cpu_s(native_id: int) -> float:
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def _process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def warm_day(n_sessions: int, messages: int, seed: int) -> None:
    """The hot path alone: n running chat sessions, each sent ``messages`` user messages
    30–120 s apart (never idle long enough to exit), no faults."""
    import random

    from corvid_actors.config import Config
    from corvid_actors.testing import ScriptedProvider, SimClock, sim_runtime

    rng = random.Random(seed)
    clock = SimClock()
    model = ScriptedProvider(clock, default_reply="fine")
    runtime = sim_runtime(clock, model, config=Config())
    try:
        sids = [runtime.create_session(source="chat", participant=f"p{i}").id for i in range(n_sessions)]
        for sid in sids:
            runtime.start_process(sid, "hello")
        runtime.settle()
        schedule = sorted((k * 120.0 + rng.uniform(0, 90), sid) for sid in sids for k in range(messages))
        for at, sid in schedule:
            clock.advance_to(at)
            if not runtime.send_message(sid, "and then?"):
                runtime.resume_process(sid, "and then?")
        clock.advance(60)
    finally:
        runtime.shutdown()
        clock.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    from corvid_actors.runtime import Runtime
    from tests.sim.test_determinism import run_day

    readings: dict[str, float] = {}
    original = Runtime.shutdown

    def shutdown(self: Runtime, *a: Any, **k: Any) -> None:
        if "supervisor_cpu_s" not in readings:
            for thread in threading.enumerate():
                if "SessionSupervisor" in thread.name and thread.native_id is not None:
                    readings["supervisor_cpu_s"] = _thread_cpu_s(thread.native_id)
            readings["process_cpu_s"] = _process_cpu_s() - readings["cpu0"]
        original(self, *a, **k)

    Runtime.shutdown = shutdown  # type: ignore[method-assign]
    sessions = 20 if args.quick else 100
    load_before = loadavg()
    rows = []
    scenarios = (("simulated day (run_day: 24 h, crashes, outages)", lambda: run_day(sessions, 24.0, seed=SEED)),
                 ("warm sessions (10 messages each, 30-120 s apart)", lambda: warm_day(sessions, 10, SEED)))
    for name, scenario in scenarios:
        readings.clear()
        readings["cpu0"] = _process_cpu_s()
        t0 = time.perf_counter()
        scenario()
        wall = time.perf_counter() - t0
        share = readings["supervisor_cpu_s"] / readings["process_cpu_s"]
        rows.append({"scenario": name, "sessions": sessions, "wall_s": round(wall, 3),
                     "process_cpu_s": round(readings["process_cpu_s"], 3),
                     "supervisor_cpu_s": round(readings["supervisor_cpu_s"], 3),
                     "supervisor_share": round(share, 3)})
    return {
        "name": "supervisor_share", "machine": machine(), "load_before": load_before,
        "runs": rows,
        "goal": "report the supervisor thread's CPU share before/after (issue 16: 58 % before)",
        "met": True,
        "command": ".venv/bin/python -m bench.supervisor_share",
    }


if __name__ == "__main__":
    cli(run)
