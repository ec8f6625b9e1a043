"""Benchmark 9 — lifecycle: a daemon's start-up and shutdown with N sessions, before/after.

Start-up is what a daemon restart does: N sessions left ``running`` by a dead process
(each with a short conversation) are reset and marked at ``Runtime(...)``, then
``resume_pending_sessions()`` brings every one back (ready, no model call: none was
mid-turn). Timed from constructing the runtime until every session runs and the runtime
is idle. Shutdown is ``Runtime.shutdown()`` with the N sessions live, until every actor
stopped; afterwards every row must be marked for resume. Also per level: the timer
table's cost of one session's cleanup (``CancelTimers``) with 3 timers per session pending.

Side by side: "after" is this tree; "before" is a recorded baseline commit
(``BASELINE_COMMIT``: main as issue 37 measured it; ``--before REF`` for another) checked
out into a temporary directory (``git archive``) and run with THIS bench code, each level in
its own process; the output records the commit. Goal: 10,000 sessions start and stop in
≤ 20 s each, with the per-session cost flat in N: each level reports the start-up cost per
session, and when 10,000 was not run, the 10,000 figure extrapolated from the measured
levels (a least-squares line of the per-session cost over N, said so in the output).

    python -m bench.lifecycle [--quick] [--sessions 1000 5000 10000] [--trials 7] [--before REF | --no-before]
    python -m bench.lifecycle --level 1000          # one level, this tree, JSON on stdout

Before and after run as paired rounds (``bench._paired``): each round runs both sides,
one process each, in alternating order (B,A then A,B …), ``--trials`` rounds per level;
the ratios of start-up and of shutdown (wall time, and the level process's CPU time for
that phase) are paired per round. The default levels are 1,000, 5,000 and 10,000 at 7
rounds (about an hour and a half here: a 10,000 restart is ~45 s a side); a smaller run
states its levels, e.g. ``--sessions 1000 5000 --trials 7`` with the 10,000 figure
extrapolated.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import (
    RESULT_MARKER,
    checkout_tree,
    cli,
    loadavg,
    machine,
    now,
    quiet_logs,
    slope,
)
from bench._paired import Outcome, compare, interleave, retimed, spread

LEVELS = (1000, 5000, 10000)
TRIALS = 7
#: the recorded baseline "before" is measured against by default: main when issue 37 was
#: measured (a moving ref such as ``main`` made before and after the same tree: a noise ratio)
BASELINE_COMMIT = "def80f194ad18e30c514191aa803ff432cda1b90"
QUICK_LEVELS = (200,)
GOAL_S = 20.0
LEVEL_TIMEOUT_S = 3600
ROOT = Path(__file__).resolve().parent.parent
#: rows per INSERT while preparing the database (SQLite takes 999+ parameters)
_CHUNK = 100


def prepare(url: str, workdir: Path, n: int) -> list[str]:
    """``n`` chat sessions of one Ollama agent, each with a user message and an answer,
    left ``running`` with a pid as a killed daemon leaves them (bulk inserts: the setup is
    not what is measured)."""
    from bench._stub_proc import BENCH_MODEL
    from corvid_actors.db.models import new_id
    from corvid_actors.db.store import Store

    store = Store(url)
    try:
        project_dir = workdir / "project"
        project_dir.mkdir(exist_ok=True)
        project = store.create_project("bench", project_dir)
        agent = store.create_agent("bench-agent", provider="ollama", model=BENCH_MODEL, permission_mode="full-auto",
                                   system_prompt="You are a benchmark.", tool_permissions=[])
        ids = [new_id() for _ in range(n)]
        m = store.m
        for start in range(0, n, _CHUNK):
            chunk = ids[start:start + _CHUNK]
            with store.transaction():
                m.Session.insert_many([
                    {"id": sid, "agent": agent.id, "project": project.id, "source": "chat", "name": f"s{start + i}",
                     "participant": f"p{start + i}", "status": "running", "pid": 800000 + start + i,
                     "total_turns": 1}
                    for i, sid in enumerate(chunk)]).execute()
                m.SessionMessage.insert_many(
                    [{"session": sid, "role": role, "content": text} for sid in chunk
                     for role, text in (("user", "hello"), ("assistant", "hi there, how can I help?"))]).execute()
        return ids
    finally:
        store.close()


def timers_cleanup_cost(owners: int = 10000, kinds: int = 3, cleanups: int = 2000) -> dict[str, Any]:
    """The timer table with ``owners × kinds`` pending timers (as many sessions' restart,
    stable and slot-wait timers): the cost of one session's cleanup (``CancelTimers``),
    told ``cleanups`` times and timed to the last one's completion."""
    import pykka

    from corvid_actors.actors.base import ActivityTracker
    from corvid_actors.actors.timers import CancelTimers, ScheduleTimer, Timers, TimerStats
    from corvid_actors.clock import RealClock

    cleanups = min(cleanups, owners)
    clock = RealClock()
    tracker = ActivityTracker()
    clock.start()
    # "before" trees (--before) still have the Timers actor (issue 18 made it a table)
    is_actor = isinstance(Timers, type) and issubclass(Timers, pykka.Actor)
    timers: Any = Timers.start(tracker, clock) if is_actor else Timers(clock)  # type: ignore[call-arg]
    try:
        for i in range(owners):
            for k in range(kinds):
                timers.tell(ScheduleTimer((f"s{i}", f"kind{k}"), 3600.0, timers, None))
        pending = timers.ask(TimerStats(), block=True)["timers"]
        t0 = now()
        for i in range(cleanups):
            timers.tell(CancelTimers(f"s{i}"))
        left = timers.ask(TimerStats(), block=True)["timers"]
        elapsed = now() - t0
    finally:
        timers.stop() if is_actor else timers.close()
        clock.stop()
    return {"timers": pending, "cleanups": cleanups, "left": left,
            "cleanup_us": round(elapsed / cleanups * 1e6, 1)}


def measure_level(n: int, passivate_after_s: float | None = None) -> dict[str, Any]:
    quiet_logs()
    import corvid_actors
    from bench._runtime import real_runtime
    from bench._stub_proc import StubProcess
    from corvid_actors.db.store import Store

    out: dict[str, Any] = {"sessions": n, "code": str(Path(corvid_actors.__file__).resolve().parent.parent),
                           "load_before": loadavg()}
    import corvid_actors.providers.ollama  # noqa: F401 - imported before the clock starts
    import corvid_actors.runtime  # noqa: F401

    with StubProcess() as url, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        db_url = f"sqlite:///{workdir / 'corvid.db'}"
        prepare(db_url, workdir, n)
        cpu0, t0 = time.process_time(), now()
        runtime = real_runtime(url, workdir, max_parallel=1000, **(
            {} if passivate_after_s is None else {"session": {"passivate_after_s": passivate_after_s}}))
        stale = len(runtime.stale_session_ids)
        t1 = now()
        resumed = runtime.resume_pending_sessions()
        t2 = now()
        runtime.settle(LEVEL_TIMEOUT_S)
        t3, cpu3 = now(), time.process_time()
        live = len(runtime.get_active_session_ids())
        t4, cpu4 = now(), time.process_time()
        runtime.shutdown(settle_timeout_s=LEVEL_TIMEOUT_S)
        t5, cpu5 = now(), time.process_time()
        check = Store(db_url)
        try:
            S = check.m.Session
            marked = S.select().where(S.restart_pending == True).count()  # noqa: E712
            stopped = S.select().where(S.status == "stopped").count()
        finally:
            check.close()
    out.update({
        "stale_reset": stale, "resumed": len(resumed), "live": live,
        "startup_s": round(t3 - t0, 2), "startup_runtime_s": round(t1 - t0, 2), "startup_resume_s": round(t3 - t1, 2),
        "startup_resume_calls_s": round(t2 - t1, 2), "startup_ms_per_session": round((t3 - t0) / n * 1e3, 2),
        "startup_cpu_s": round(cpu3 - cpu0, 3), "shutdown_cpu_s": round(cpu5 - cpu4, 3),
        "shutdown_s": round(t5 - t4, 2), "shutdown_ms_per_session": round((t5 - t4) / n * 1e3, 3),
        "marked_after_shutdown": marked, "stopped_after_shutdown": stopped,
        "complete": live == n and marked == n and stopped == n,
        # one session's timer cleanup among 3 timers per live session
        "timers_cleanup": timers_cleanup_cost(owners=n), "load_after": loadavg(),
    })
    return out


def growth(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """Start-up ms per session at each measured level, per side (the median round), and at
    10,000: measured, or extrapolated on a least-squares line through the levels (with
    two or more of them; said so)."""
    out: dict[str, Any] = {}
    for side in ("before", "after"):
        points = [(float(lv["sessions"]), float(lv[side]["startup_s_spread"]["median"]) / lv["sessions"] * 1e3)
                  for lv in levels if side in lv and "startup_s_spread" in lv[side]]
        if not points:
            continue
        measured = {int(n): round(ms, 3) for n, ms in points}
        entry: dict[str, Any] = {"measured": measured}
        if 10000 not in measured and len(points) >= 2:
            k = slope(points)
            mean_n = sum(n for n, _ in points) / len(points)
            mean_ms = sum(ms for _, ms in points) / len(points)
            entry["extrapolated_10000"] = round(mean_ms + k * (10000 - mean_n), 3)
            entry["extrapolated_10000_startup_s"] = round(entry["extrapolated_10000"] * 10, 1)
        out[side] = entry
    return out


def _run_level(tree: Path, n: int, passivate_after_s: float | None = None) -> dict[str, Any]:
    extra = [] if passivate_after_s is None else ["--passivate-after", str(passivate_after_s)]
    done = subprocess.run([sys.executable, "-m", "bench.lifecycle", "--level", str(n), *extra], cwd=tree,
                          capture_output=True, text=True, timeout=LEVEL_TIMEOUT_S + 600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_MARKER)]
    if lines:
        return json.loads(lines[-1][len(RESULT_MARKER):])
    return {"sessions": n, "error": f"level process failed (exit {done.returncode}): {done.stderr[-800:]}"}


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.level:
        return measure_level(args.level, args.passivate_after)
    levels = tuple(args.sessions) if args.sessions else (QUICK_LEVELS if args.quick else LEVELS)
    trials = args.trials or (1 if args.quick else TRIALS)
    before_ref = None if args.no_before else args.before
    results: list[dict[str, Any]] = []
    paired: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="corvid-before-") as tmp:
        before_commit = checkout_tree(before_ref, Path(tmp)) if before_ref else None
        for n in levels:
            def level(tree: Path, n: int = n) -> Outcome:
                result = _run_level(tree, n, args.passivate_after)
                if "error" in result:
                    raise RuntimeError(result["error"])
                return Outcome(n, result)
            sides = {"after": lambda: level(ROOT)}
            if before_commit:
                sides = {"before": lambda: level(Path(tmp)), **sides}
            # each trial is a fresh process: no warm-up to keep, the rounds alternate B,A / A,B
            rows = interleave(sides, trials=trials, warmup=0)
            row: dict[str, Any] = {"sessions": n, "trials": trials}
            for side, trials_ in rows.items():
                row[side] = trials_[len(trials_) // 2].extra  # the middle round, as a table column
                row[side]["startup_s_spread"] = spread([t.extra["startup_s"] for t in trials_], 2)
                row[side]["shutdown_s_spread"] = spread([t.extra["shutdown_s"] for t in trials_], 2)
            if before_commit:
                for phase in ("startup", "shutdown"):
                    phased = {side: retimed(t, f"{phase}_s", f"{phase}_cpu_s") for side, t in rows.items()}
                    paired.append(compare(phased, "before", "after", kind="cost", digits=2,
                                          label=f"{n:,} sessions' {phase}: this tree / {str(before_commit)[:10]} (time)"))
            results.append(row)
    after_commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                  text=True).stdout.strip()
    top = results[-1]["after"]
    return {
        "name": "lifecycle", "machine": machine(), "levels": results, "paired": paired,
        "per_session_ms": growth(results),
        "before_ref": before_ref, "before_commit": before_commit, "after_commit": after_commit,
        "goal": f"10,000 sessions start (daemon restart: reset + resume) and shut down in ≤ {GOAL_S:g} s each",
        "met": (bool(top.get("sessions") == 10000 and top.get("complete") and top.get("startup_s", 1e9) <= GOAL_S
                     and top.get("shutdown_s", 1e9) <= GOAL_S) if top.get("sessions") == 10000 else None),
        "command": ".venv/bin/python -m bench.lifecycle --sessions " + " ".join(str(n) for n in levels)
                   + f" --trials {trials}"
                   + ("" if args.passivate_after is None else f" --passivate-after {args.passivate_after:g}"),
    }


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--level", type=int, default=0, help="run one level on this tree (JSON out)")
    parser.add_argument("--sessions", type=int, nargs="*", help=f"levels (default {LEVELS})")
    parser.add_argument("--before", default=BASELINE_COMMIT,
                        help=f"the git ref measured as 'before' (default the recorded baseline {BASELINE_COMMIT[:10]})")
    parser.add_argument("--no-before", action="store_true", help="measure this tree only")
    parser.add_argument("--passivate-after", type=float, default=None,
                        help="[session] passivate_after_s for both sides (0: off, every session built and "
                             "live; default: the config's, under which this tree resumes waiting sessions "
                             "passivated; a tree older than passivation does not know the key: "
                             "with --no-before or a later --before)")
    parser.add_argument("--trials", type=int, default=0, help=f"rounds per level (default {TRIALS})")


if __name__ == "__main__":
    cli(run, _flags)
