"""Benchmark 14 — CPU per warm threaded turn, this tree against a baseline commit (issue 37 item 1).

One chat session of an Ollama agent (the direct loop, no tools) on a real-clock Runtime
with a SQLite WAL file; the Ollama stub runs in its own process and answers every message
with one token at once, so what is measured is the runtime's own work per turn: the send
(the user message and its open turn in one statement), the session's wake-up, the model
call on the I/O loop, the reply's write, the events, and — every
``[session] max_turns_before_context_reset`` turns, as in production — the context reset's
new incarnation. The session is warmed up first (``WARMUP`` turns), then ``--turns`` turns
are sent one after the other, each waiting for its ``result`` event. Measured: this
process's CPU time (every thread; the stub's process is not counted) and wall time per turn.

Each trial runs in a fresh process in its tree: "before" is ``--before`` (default: the main
commit this work started from, ``BASELINE_COMMIT``) checked out with ``git archive`` and
run with this bench code; "after" is this tree. Trials alternate (B,A then A,B …,
``bench._paired``), ``--trials`` rounds (≥ 7); the ratio is after/before CPU per turn,
paired per round, with the load average before and after.

    python -m bench.turn_cpu [--quick] [--turns 300] [--trials 7] [--before REF | --no-before]
    python -m bench.turn_cpu --one --turns 300     # one trial, this tree, JSON on stdout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import RESULT_MARKER, ROOT, checkout_tree, cli, loadavg, machine, quiet_logs
from bench._paired import Outcome, compare, interleave, spread

#: main when issue 37 item 1's cache and pool cap began (the branch point of turn-cpu)
BASELINE_COMMIT = "599e2b2"
TURNS = 300
QUICK_TURNS = 60
WARMUP = 20
TRIALS = 7
#: one trial's process: start-up, warm-up and the turns (a turn is a few ms)
TRIAL_TIMEOUT_S = 600
GOAL_MS = 2.0


def one(turns: int) -> dict[str, Any]:
    """``turns`` warm turns of one session in this process (see the module docstring)."""
    from bench._runtime import Waiter, create_sessions, real_runtime
    from bench._stub_proc import StubProcess, prompt

    quiet_logs()
    with StubProcess() as url, tempfile.TemporaryDirectory(prefix="corvid-turn-cpu-") as tmp:
        runtime = real_runtime(url, Path(tmp), max_parallel=4)
        try:
            sid = create_sessions(runtime, Path(tmp), 1)[0]
            waiter = Waiter()
            runtime.subscribe_all(lambda _sid, event: waiter.bump(event.type))
            runtime.start_process(sid, prompt(1))
            done = 1
            if not waiter.wait("result", done, 30):
                raise RuntimeError("the first turn did not end")
            for _ in range(WARMUP):
                runtime.send_message(sid, prompt(1))
                done += 1
                if not waiter.wait("result", done, 30):
                    raise RuntimeError("a warm-up turn did not end")
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(turns):
                runtime.send_message(sid, prompt(1))
                done += 1
                if not waiter.wait("result", done, 30):
                    raise RuntimeError("a turn did not end")
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            starts = waiter.counts.get("session_started", 0)
        finally:
            runtime.shutdown()
    import corvid_actors

    return {"turns": turns, "cpu_s": cpu, "wall_s": wall, "incarnations": starts,
            "package": str(Path(corvid_actors.__file__).parent)}


def trial_in(tree: Path, turns: int) -> Outcome:
    """:func:`one` in a fresh process in ``tree`` (its package, this bench code)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "bench.turn_cpu", "--one", "--turns", str(turns)], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=TRIAL_TIMEOUT_S)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_MARKER)]
    if not lines:
        raise RuntimeError(f"the trial in {tree} failed (exit {done.returncode}): {done.stderr[-800:]}")
    result = json.loads(lines[-1][len(RESULT_MARKER):])
    if not Path(result["package"]).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"the trial in {tree} imported corvid_actors from {result['package']}")
    return Outcome(turns, {"incarnations": result["incarnations"], "load": loadavg()[0]},
                   wall_s=result["wall_s"], cpu_s=result["cpu_s"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    turns = args.turns or (QUICK_TURNS if args.quick else TURNS)
    if args.one:
        return one(turns)
    trials = args.trials or (3 if args.quick else TRIALS)
    load_before = loadavg()
    with tempfile.TemporaryDirectory(prefix="corvid-turn-cpu-tree-") as tmp:
        sides = {"this_tree": lambda: trial_in(ROOT, turns)}
        commit = None
        if not args.no_before:
            commit = checkout_tree(args.before, Path(tmp))
            sides = {"before": lambda: trial_in(Path(tmp), turns), **sides}
        rows = interleave(sides, trials=trials, warmup=0)
    out: dict[str, Any] = {
        "benchmark": "turn_cpu", "machine": machine(), "turns_per_trial": turns, "warmup_turns": WARMUP,
        "load_before": load_before,
        "cpu_ms_per_turn": {side: spread([t.per_unit("cpu") * 1e3 for t in ts]) for side, ts in rows.items()},
        "wall_ms_per_turn": {side: spread([t.per_unit("wall") * 1e3 for t in ts]) for side, ts in rows.items()},
        "incarnations": {side: ts[0].extra["incarnations"] for side, ts in rows.items()},
        "cpu_ms_per_trial": {side: [round(t.per_unit("cpu") * 1e3, 3) for t in ts] for side, ts in rows.items()},
        "load_per_trial": {side: [round(t.extra["load"], 2) for t in ts] for side, ts in rows.items()},
        "goal": f"≤ {GOAL_MS:g} ms of CPU per warm threaded turn",
    }
    if commit is not None:
        out["before"] = {"ref": args.before, "commit": commit}
        out["pair"] = compare(rows, "before", "this_tree", kind="cost", digits=3,
                              label=f"CPU per warm threaded turn: this tree / {commit[:7]} (fresh processes)")
    return out


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=0)
    parser.add_argument("--trials", type=int, default=0)
    parser.add_argument("--before", default=BASELINE_COMMIT, help="the baseline commit (default: %(default)s)")
    parser.add_argument("--no-before", action="store_true", help="measure this tree only")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)


if __name__ == "__main__":
    cli(run, _flags)
