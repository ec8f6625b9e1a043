"""Benchmark 5 — simulated time: the 100-session simulated day, its wall and CPU cost per turn.

The scenario is ``run_day`` of ``tests/sim/test_determinism.py``: chat sessions on a
SimClock, three user turns each at random times, 15 % of model calls crashing (backoff
restarts) and 10 % outages (pause, health probe, auto-resume). The same 300 turns are
spread over 24 h and over 240 h, as a paired comparison (``bench._paired``: a warm-up of
each, then interleaved rounds): the ratio shows what quiet hours cost (cost should follow
events, not hours).

The baseline issue 18's inline dispatcher is measured against: the 24 h day's wall time,
CPU per simulated turn, and, from one extra untimed run with counters patched into this
process (nothing in the package changes), actor messages per turn (every put into a
tracked actor's inbox), SQL statements per turn (peewee's ``execute_sql``), timer firings
and context switches.

    python -m bench.simtime [--quick] [--trials K]
"""

from __future__ import annotations

import argparse
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench._common import cli, loadavg, machine, quiet_logs
from bench._paired import Outcome, compare, interleave, summary

GOAL_HOURS_PER_S = 1000.0
#: issue 18: the 100-session day in at most this much wall time (inline dispatcher)
GOAL_DAY_WALL_S = 0.15
SEED = 42
TRIALS = 5
TURNS_PER_SESSION = 3
#: run_day runs one more hour to let the last turns finish
EXTRA_HOURS = 1.0


def day(sessions: int, hours: float, dispatcher: str = "inline") -> Callable[[], Outcome]:
    from tests.sim.test_determinism import run_day

    def go() -> Outcome:
        log, _final = run_day(sessions, hours, seed=SEED, dispatcher=dispatcher)
        return Outcome(sessions * TURNS_PER_SESSION, {"events": len(log)})
    return go


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
    quiet_logs()
    sessions = 20 if args.quick else 100
    trials = args.trials or (2 if args.quick else TRIALS)
    load_before = loadavg()
    rows = interleave({"day_24h": day(sessions, 24.0), "day_240h": day(sessions, 240.0),
                       "threads_24h": day(sessions, 24.0, "threads")}, trials=trials, warmup=1)
    with counters() as counts:
        day(sessions, 24.0)()
    with counters() as thread_counts:
        day(sessions, 24.0, "threads")()
    turns = sessions * TURNS_PER_SESSION
    runs = []
    for name, hours in (("day_24h", 24.0), ("day_240h", 240.0), ("threads_24h", 24.0)):
        s = summary(rows[name])
        wall = s["wall_us_per_unit"] * turns / 1e6
        runs.append({"run": name, "dispatcher": "threads" if name.startswith("threads") else "inline",
                     "hours": hours, "sessions": sessions, "turns": turns, "wall_s": round(wall, 3),
                     "cpu_s": round(s["cpu_us_per_unit"] * turns / 1e6, 3),
                     "wall_ms_per_turn": round(s["wall_us_per_unit"] / 1e3, 2),
                     "cpu_ms_per_turn": round(s["cpu_us_per_unit"] / 1e3, 2),
                     "events": rows[name][0].extra["events"],
                     "simulated_hours_per_s": round((hours + EXTRA_HOURS) / wall, 1),
                     "wall_ms_per_simulated_hour": round(wall / (hours + EXTRA_HOURS) * 1e3, 2)})
    per_turn = {k.replace("_", " "): round(v / turns, 1) for k, v in counts.items()}
    per_turn_threads = {k.replace("_", " "): round(v / turns, 1) for k, v in thread_counts.items()}
    paired = [compare(rows, "threads_24h", "day_24h", kind="cost",
                      label=f"the {sessions}-session day: inline dispatcher / thread dispatcher (time per turn)",
                      goal=f"wall ≤ {GOAL_DAY_WALL_S} s (≥ 10× the thread dispatcher)"),
              compare(rows, "day_24h", "day_240h", kind="cost",
                      label=f"{sessions} sessions' {turns} turns over 240 h / over 24 h (time per turn)")]
    best = runs[0]["simulated_hours_per_s"]
    return {
        "name": "simtime", "machine": machine(), "load_before": load_before, "trials": trials, "runs": runs,
        "paired": paired, "counts_24h": counts, "per_turn_24h": per_turn,
        "per_turn_24h_threads": per_turn_threads, "day_wall_s_inline": runs[0]["wall_s"],
        "day_wall_s_threads": runs[2]["wall_s"],
        "baseline": {"day_wall_s": runs[0]["wall_s"], "day_cpu_s": runs[0]["cpu_s"],
                     "cpu_ms_per_turn": runs[0]["cpu_ms_per_turn"], **{f"{k} per turn": v for k, v in per_turn.items()}},
        "goal": f"≥ {GOAL_HOURS_PER_S:g} simulated hours per wall second ({sessions} sessions, 24 h)",
        "met": best >= GOAL_HOURS_PER_S,
        "command": ".venv/bin/python -m bench.simtime",
    }


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=0)


if __name__ == "__main__":
    cli(run, _flags)
