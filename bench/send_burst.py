"""Benchmark 13 — a burst of sends: N messages to N live sessions, vs the store's raw append.

What a chat front end does when many users write at once: ``Runtime.send_message`` to N
live, idle chat sessions (each created and answered once before the trials; the stub, in
its own process, answers every message with one token, so each send starts a short turn
that runs while the burst goes on). Paired with the floor under it: the same N messages
written with the store's own ``append_message`` (to N other sessions of the same
database, which no actor holds), one call after the other on this thread.

Per trial: sends/s over the burst, p50/p99 of each call's wall time, this process's CPU
per send while the calls ran (``calls``), and until every session's turn has ended and the
runtime is idle (``settled``: what the turns the sends triggered cost, per send). Trials
of the runtime and of the raw append alternate (``bench._paired``, ≥ 7 rounds); the
ratio is the runtime's time per send over the raw append's, in wall and in CPU time.

The benchmark uses only the public API (``Runtime``, ``send_message``,
``internals.store.append_message``): it runs on an older commit too, e.g.
``git worktree add --detach /tmp/base <commit>`` and
``PYTHONPATH=/tmp/base python -m bench.send_burst`` (this bench/ beside it).

    python -m bench.send_burst [--quick] [--sessions 100 1000] [--trials 7]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import cli, loadavg, machine, percentile, quiet_logs
from bench._paired import Outcome, compare, cpu_seconds, interleave, spread
from bench._runtime import Waiter, create_sessions, real_runtime
from bench._stub_proc import StubProcess, prompt

LEVELS = (100, 1000)
TRIALS = 7
#: issue 37's goal for 1,000 sends to 1,000 live sessions
GOAL_SENDS_PER_S = 5000
GOAL_P99_MS = 5.0
TIMEOUT_S = 600.0


def _outcome(call_s: list[float], wall_s: float, cpu_calls: float, cpu_settled: float | None) -> Outcome:
    n = len(call_s)
    extra = {"sends_per_s": round(n / wall_s), "p50_ms": round(percentile(call_s, 50) * 1e3, 3),
             "p99_ms": round(percentile(call_s, 99) * 1e3, 3), "cpu_ms_per_send_calls": round(cpu_calls / n * 1e3, 3)}
    if cpu_settled is not None:
        extra["cpu_ms_per_send_settled"] = round(cpu_settled / n * 1e3, 3)
    # the paired ratio is of the burst itself (the calls), not of the turns that follow
    return Outcome(n, extra, wall_s=wall_s, cpu_s=cpu_calls)


class Burst:
    """``n`` live sessions for the runtime's sends and ``n`` idle ones for the raw appends."""

    def __init__(self, url: str, workdir: Path, n: int) -> None:
        self.waiter = Waiter()
        self.runtime = real_runtime(url, workdir, max_parallel=n)
        self.live = create_sessions(self.runtime, workdir, n)
        first = self.runtime.session(self.live[0])
        self.quiet = [self.runtime.create_session(agent_id=first.agent_id, project_id=first.project_id,
                                                  name=f"raw{i}").id for i in range(n)]
        self.store = self.runtime.internals.store
        self.runtime.subscribe_all(lambda _sid, event: self.waiter.bump(event.type))
        for sid in self.live:
            self.runtime.start_process(sid, prompt(1))
        if not self.waiter.wait("result", n, TIMEOUT_S):
            raise RuntimeError("the sessions did not answer their first prompt")
        self.runtime.settle(TIMEOUT_S)
        self.k = 0

    def sends(self) -> Outcome:
        self.k += 1
        results = self.waiter.counts.get("result", 0)
        text = prompt(1) + f" burst {self.k}"
        call_s = []
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        for sid in self.live:
            c0 = time.perf_counter()
            if not self.runtime.send_message(sid, text):
                raise RuntimeError(f"session {sid} refused the message")
            call_s.append(time.perf_counter() - c0)
        wall, cpu_calls = time.perf_counter() - t0, cpu_seconds() - cpu0
        if not self.waiter.wait("result", results + len(self.live), TIMEOUT_S):
            raise RuntimeError("the sessions did not answer the burst")
        self.runtime.settle(TIMEOUT_S)
        return _outcome(call_s, wall, cpu_calls, cpu_seconds() - cpu0)

    def raw(self) -> Outcome:
        self.k += 1
        text = prompt(1) + f" burst {self.k}"
        call_s = []
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        for sid in self.quiet:
            c0 = time.perf_counter()
            self.store.append_message(sid, "user", text)
            call_s.append(time.perf_counter() - c0)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        return _outcome(call_s, wall, cpu, None)

    def close(self) -> None:
        self.runtime.shutdown(settle_timeout_s=TIMEOUT_S)


def _commit(tree: Path) -> str:
    """The commit of the measured tree (a git worktree), or "?" (an archive)."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
    return done.stdout.strip() or "?"


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    import corvid_actors

    tree = Path(corvid_actors.__file__).resolve().parent.parent
    commit = _commit(tree)  # at the start: the code this process imported
    levels = args.sessions or ([100] if args.quick else list(LEVELS))
    trials = args.trials or (3 if args.quick else TRIALS)
    out: list[dict[str, Any]] = []
    paired: list[dict[str, Any]] = []
    load_before = loadavg()
    with StubProcess() as url:
        for n in levels:
            lb = loadavg()
            with tempfile.TemporaryDirectory() as tmp:
                burst = Burst(url, Path(tmp), n)
                try:
                    rows = interleave({"raw_append": burst.raw, "send_message": burst.sends}, trials=trials, warmup=1)
                finally:
                    burst.close()
            level: dict[str, Any] = {"sessions": n, "load_before": lb, "load_after": loadavg()}
            for name, ts in rows.items():
                level[name] = {key: spread([t.extra[key] for t in ts], 3)
                               for key in ts[0].extra if key not in ("csw",)}
            out.append(level)
            paired.append(compare(rows, "raw_append", "send_message", kind="cost",
                                  label=f"{n:,} sends to {n:,} live sessions: send_message / the store's raw "
                                        "append_message (time per call)"))
    top = next((lv for lv in out if lv["sessions"] == 1000), None)
    met = None if top is None else bool(top["send_message"]["sends_per_s"]["median"] >= GOAL_SENDS_PER_S
                                        and top["send_message"]["p99_ms"]["median"] <= GOAL_P99_MS)
    return {"name": "send_burst", "machine": machine(), "load_before": load_before, "levels": out, "paired": paired,
            "trials": trials, "tree": str(tree), "commit": commit,
            "goal": f"1,000 sends to 1,000 live sessions at ≥ {GOAL_SENDS_PER_S:,} sends/s, p99 ≤ {GOAL_P99_MS:g} ms "
                    "per call", "met": met, "command": ".venv/bin/python -m bench.send_burst"}


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, nargs="*", help=f"live sessions = sends per burst (default {LEVELS})")
    parser.add_argument("--trials", type=int, default=0, help=f"paired rounds (default {TRIALS})")


if __name__ == "__main__":
    cli(run, _flags)
