"""Benchmark 5 — simulated time: the 100-session simulated day, its wall and CPU cost per turn.

The scenario is ``run_day`` of ``tests/sim/test_determinism.py``: chat sessions on a
SimClock, three user turns each at random times, 15 % of model calls crashing (backoff
restarts) and 10 % outages (pause, health probe, auto-resume). The same 300 turns are
spread over 24 h and over 240 h, and the 24 h day with no inactivity stops (every turn
after a quiet spell reaches a running incarnation instead of starting one: what the
incarnations' starts and stops cost), as paired comparisons (``bench._paired``: a warm-up of
each, then interleaved rounds): the ratio shows what quiet hours cost (cost should follow
events, not hours).

The baseline issue 18's inline dispatcher is measured against: the 24 h day's wall time,
CPU per simulated turn, and, from one extra untimed run with counters patched into this
process (nothing in the package changes), actor messages per turn (every put into a
tracked actor's inbox), SQL statements per turn (peewee's ``execute_sql``), timer firings
and context switches.

Issue 18's goal — the day ≥ 10× faster than "today" — is measured side by side: the
commit whose day the issue measured (``ISSUE_BASELINE``, 1.2–1.5 s of CPU on the
issue's machine) and this tree each run the day in fresh processes, interleaved
(``--before REF`` measures another commit, ``--no-before`` skips it). Wall-clock
figures differ by ×3 between the machines these benchmarks have run on; the paired
ratio does not depend on which.

    python -m bench.simtime [--quick] [--trials K] [--before REF | --no-before]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._common import RESULT_MARKER, ROOT, checkout_tree, cli, loadavg, machine, quiet_logs
from bench._paired import Outcome, compare, cpu_seconds, interleave, summary

GOAL_HOURS_PER_S = 1000.0
#: issue 18: the 100-session day in at most this much wall time (inline dispatcher)
GOAL_DAY_WALL_S = 0.15
SEED = 42
TRIALS = 5
TURNS_PER_SESSION = 3
#: run_day runs one more hour to let the last turns finish
EXTRA_HOURS = 1.0
#: the commit that recorded issue 18's baselines ("bench: … baselines for issue 18"): the
#: "today" of its "≥ 10× today"
ISSUE_BASELINE = "bd9c9ab"
#: the goal as a paired ratio: this tree's day / the baseline's, wall time
GOAL_RATIO = 0.1
#: one day in a fresh process: imports, a warm-up day and the timed day
ONE_DAY_TIMEOUT_S = 600
#: rounds of the pair against the baseline (each a fresh process a side: ~13 s a round on a
#: slow machine; the ratio is ×4, far from noise)
BEFORE_TRIALS = 3
#: the no-idle-exit day's inactivity timeout: longer than the day (it can be at most 24 h)
NO_EXIT_TIMEOUT_S = 86400.0
#: the cold-resume pair: stored messages of the long session, and cold turns timed
LONG_HISTORY = 20_000
COLD_TURNS = 100


def day(sessions: int, hours: float, dispatcher: str = "inline", *, idle_exits: bool = True) -> Callable[[], Outcome]:
    """The day; ``idle_exits=False``: the same turns, but no session is stopped for
    inactivity (``session_timeout_s`` longer than the day), so a turn after a quiet
    spell goes to the running incarnation instead of starting a new one."""
    from corvid_actors.config import Config
    from tests.sim.test_determinism import run_day

    config = None if idle_exits else Config().replace(supervisor={"session_timeout_s": NO_EXIT_TIMEOUT_S})

    def go() -> Outcome:
        log, _final = run_day(sessions, hours, seed=SEED, dispatcher=dispatcher, config=config)
        return Outcome(sessions * TURNS_PER_SESSION, {
            "events": len(log), "incarnations": sum(e["type"] == "session_started" for e in log)})
    return go


def cold_turns(history: int) -> Callable[[], Outcome]:
    """One session with ``history`` stored messages, a turn every two simulated hours: each
    is a cold resume (history read, exit notes, start, reply, inactivity stop). Only the
    turns are timed, not filling the history."""
    from corvid_actors.clock import RealClock
    from corvid_actors.config import Config
    from corvid_actors.testing import ScriptedProvider, SimClock, sim_runtime

    real = RealClock()  # its monotonic stays real while the SimClock freezes time

    def go() -> Outcome:
        clock = SimClock()
        model = ScriptedProvider(clock, default_reply="fine")
        runtime = sim_runtime(clock, model, config=Config())
        try:
            runtime.create_session(source="chat", name="long", session_id="long")
            store = runtime.internals.store
            for _ in range(history // 1000):
                store.append_messages([("long", "user", "question " * 8), ("long", "assistant", "answer " * 30)] * 500)
            cpu0, t0 = cpu_seconds(), real.monotonic()
            for i in range(COLD_TURNS):
                if not runtime.send_message("long", f"message {i}"):
                    runtime.resume_process("long", f"message {i}")
                clock.advance(7200)
            wall, cpu = real.monotonic() - t0, cpu_seconds() - cpu0
        finally:
            runtime.shutdown()
            clock.close()
        return Outcome(COLD_TURNS, {"history": history}, wall_s=wall, cpu_s=cpu)
    return go


def one_day(sessions: int, hours: float) -> dict[str, Any]:
    """In this process, with whichever tree's ``run_day`` is importable here: a warm-up
    day, then the timed one (its default dispatcher: threads before issue 18, inline
    after)."""
    from tests.sim import test_determinism

    quiet_logs()
    run_day = test_determinism.run_day
    run_day(sessions, hours, seed=SEED)
    cpu0, t0 = time.process_time(), time.perf_counter()
    log, _final = run_day(sessions, hours, seed=SEED)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    package = sys.modules["corvid_actors"].__file__ or ""
    return {"wall_s": wall, "cpu_s": cpu, "events": len(log), "package": package,
            "dispatcher_arg": "dispatcher" in inspect.signature(run_day).parameters}


def day_in(tree: Path, sessions: int, hours: float) -> Outcome:
    """:func:`one_day` in a fresh process in ``tree`` (its own package, tests and bench/)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "bench.simtime", "--one-day", "--sessions", str(sessions),
                           "--hours", str(hours)], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=ONE_DAY_TIMEOUT_S)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_MARKER)]
    if not lines:
        raise RuntimeError(f"the day in {tree} failed (exit {done.returncode}): {done.stderr[-800:]}")
    result = json.loads(lines[-1][len(RESULT_MARKER):])
    if not Path(result["package"]).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"the day in {tree} imported corvid_actors from {result['package']}")
    return Outcome(sessions * TURNS_PER_SESSION, {"events": result["events"]},
                   wall_s=result["wall_s"], cpu_s=result["cpu_s"])


def against_baseline(ref: str, sessions: int, trials: int) -> dict[str, Any]:
    """This tree's day and ``ref``'s, each in fresh processes, interleaved: the paired ratio."""
    with tempfile.TemporaryDirectory(prefix="corvid-simtime-") as tmp:
        commit = checkout_tree(ref, Path(tmp))
        rows = interleave({"issue_baseline": lambda: day_in(Path(tmp), sessions, 24.0),
                           "this_tree": lambda: day_in(ROOT, sessions, 24.0)}, trials=trials, warmup=0)
    against = "issue 18's baseline" if ref == ISSUE_BASELINE else ref
    pair = compare(rows, "issue_baseline", "this_tree", kind="cost", digits=3,
                   label=f"the {sessions}-session day: this tree / {against} {commit[:7]} "
                         "(time per turn, fresh processes)",
                   goal=f"≤ {GOAL_RATIO:g} (≥ 10× the issue's day)")
    return {"ref": ref, "commit": commit, "pair": pair,
            "events": {side: trials_[0].extra["events"] for side, trials_ in rows.items()},
            "wall_s": {side: round(summary(trials_)["wall_us_per_unit"] * sessions * TURNS_PER_SESSION / 1e6, 3)
                       for side, trials_ in rows.items()}}


@contextmanager
def counters() -> Iterator[dict[str, int]]:
    """Count actor messages, SQL statements and timer firings in this process meanwhile."""
    import peewee

    from corvid_actors.actors import base, inline
    from corvid_actors.testing.clock import SimClock

    counts = {"actor_messages": 0, "sql_statements": 0, "timer_firings": 0}
    put, execute_sql, advance_to = base._TrackingInbox.put, peewee.Database.execute_sql, SimClock.advance_to
    inline_put = inline._InlineInbox.put

    def counting_put(self: Any, *args: Any, **kwargs: Any) -> None:
        counts["actor_messages"] += 1
        put(self, *args, **kwargs)

    def counting_inline_put(self: Any, *args: Any, **kwargs: Any) -> None:
        counts["actor_messages"] += 1
        inline_put(self, *args, **kwargs)

    def counting_sql(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["sql_statements"] += 1
        return execute_sql(self, *args, **kwargs)

    def counting_advance(self: Any, t: float) -> int:
        fired = advance_to(self, t)
        counts["timer_firings"] += fired
        return fired

    base._TrackingInbox.put = counting_put  # type: ignore[method-assign]
    inline._InlineInbox.put = counting_inline_put  # type: ignore[method-assign]
    peewee.Database.execute_sql = counting_sql  # type: ignore[method-assign]
    SimClock.advance_to = counting_advance  # type: ignore[method-assign]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    try:
        yield counts
    finally:
        base._TrackingInbox.put = put  # type: ignore[method-assign]
        inline._InlineInbox.put = inline_put  # type: ignore[method-assign]
        peewee.Database.execute_sql = execute_sql  # type: ignore[method-assign]
        SimClock.advance_to = advance_to  # type: ignore[method-assign]
        after = resource.getrusage(resource.RUSAGE_SELF)
        counts["context_switches"] = (after.ru_nvcsw - usage.ru_nvcsw) + (after.ru_nivcsw - usage.ru_nivcsw)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.one_day:
        return one_day(args.sessions or 100, args.hours)
    quiet_logs()
    sessions = 20 if args.quick else 100
    trials = args.trials or (2 if args.quick else TRIALS)
    load_before = loadavg()
    rows = interleave({"day_24h": day(sessions, 24.0), "day_240h": day(sessions, 240.0),
                       "threads_24h": day(sessions, 24.0, "threads"),
                       "no_exits_24h": day(sessions, 24.0, idle_exits=False)}, trials=trials, warmup=1)
    cold = interleave({"cold_no_history": cold_turns(0), "cold_long_history": cold_turns(LONG_HISTORY)},
                      trials=trials, warmup=1)
    with counters() as counts:
        day(sessions, 24.0)()
    with counters() as thread_counts:
        day(sessions, 24.0, "threads")()
    turns = sessions * TURNS_PER_SESSION
    runs = []
    for name, hours in (("day_24h", 24.0), ("day_240h", 240.0), ("threads_24h", 24.0), ("no_exits_24h", 24.0)):
        s = summary(rows[name])
        wall = s["wall_us_per_unit"] * turns / 1e6
        runs.append({"run": name, "dispatcher": "threads" if name.startswith("threads") else "inline",
                     "hours": hours, "sessions": sessions, "turns": turns, "wall_s": round(wall, 3),
                     "cpu_s": round(s["cpu_us_per_unit"] * turns / 1e6, 3),
                     "wall_ms_per_turn": round(s["wall_us_per_unit"] / 1e3, 2),
                     "cpu_ms_per_turn": round(s["cpu_us_per_unit"] / 1e3, 2),
                     "events": rows[name][0].extra["events"],
                     "incarnations": rows[name][0].extra["incarnations"],
                     "simulated_hours_per_s": round((hours + EXTRA_HOURS) / wall, 1),
                     "wall_ms_per_simulated_hour": round(wall / (hours + EXTRA_HOURS) * 1e3, 2)})
    per_turn = {k.replace("_", " "): round(v / turns, 1) for k, v in counts.items()}
    per_turn_threads = {k.replace("_", " "): round(v / turns, 1) for k, v in thread_counts.items()}
    paired = [compare(rows, "threads_24h", "day_24h", kind="cost",
                      label=f"the {sessions}-session day: inline dispatcher / thread dispatcher (time per turn)",
                      goal=f"wall ≤ {GOAL_DAY_WALL_S} s (≥ 10× the thread dispatcher)"),
              compare(rows, "day_24h", "day_240h", kind="cost",
                      label=f"{sessions} sessions' {turns} turns over 240 h / over 24 h (time per turn)"),
              compare(rows, "day_24h", "no_exits_24h", kind="cost",
                      label=f"the {sessions}-session day with no inactivity stops / the day (time per turn: "
                            "what starting and stopping incarnations costs)"),
              compare(cold, "cold_no_history", "cold_long_history", kind="cost",
                      label=f"a cold resume of a session with {LONG_HISTORY:,} stored messages / with none "
                            "(time per turn)", goal="≈ 1 (the history read does not grow with the session)")]
    best = runs[0]["simulated_hours_per_s"]
    baseline = None if args.no_before else against_baseline(
        args.before, sessions, args.before_trials or (2 if args.quick else BEFORE_TRIALS))
    if baseline is not None:
        paired.insert(0, baseline["pair"])
    ratio = baseline["pair"]["wall"]["median"] if baseline is not None else None
    return {
        "name": "simtime", "machine": machine(), "load_before": load_before, "trials": trials, "runs": runs,
        "paired": paired, "counts_24h": counts, "per_turn_24h": per_turn,
        "per_turn_24h_threads": per_turn_threads, "day_wall_s_inline": runs[0]["wall_s"],
        "day_wall_s_threads": runs[2]["wall_s"],
        "baseline": {"day_wall_s": runs[0]["wall_s"], "day_cpu_s": runs[0]["cpu_s"],
                     "cpu_ms_per_turn": runs[0]["cpu_ms_per_turn"], **{f"{k} per turn": v for k, v in per_turn.items()}},
        "against_issue_baseline": baseline,
        "goal": (f"≥ {GOAL_HOURS_PER_S:g} simulated hours per wall second ({sessions} sessions, 24 h); "
                 f"the day ≥ 10× the issue's (paired: this tree / {args.before} ≤ {GOAL_RATIO:g}); "
                 f"≤ {GOAL_DAY_WALL_S:g} s wall on the issue's machine"),
        "met": best >= GOAL_HOURS_PER_S and (ratio is None or ratio <= GOAL_RATIO),
        "command": ".venv/bin/python -m bench.simtime",
    }


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=0)
    parser.add_argument("--before", default=ISSUE_BASELINE,
                        help=f"the commit the day is paired against (default {ISSUE_BASELINE}, issue 18's)")
    parser.add_argument("--no-before", action="store_true", help="measure this tree only")
    parser.add_argument("--before-trials", type=int, default=0,
                        help=f"rounds of the pair against --before (default {BEFORE_TRIALS})")
    parser.add_argument("--one-day", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--hours", type=float, default=24.0, help=argparse.SUPPRESS)


if __name__ == "__main__":
    cli(run, _flags)
