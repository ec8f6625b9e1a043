"""Benchmark 1 — streaming overhead: tokens/s to a subscriber through the runtime vs the raw client.

The same stub (in its own process) streams the same reply of N one-word chunks to:
- ``ceiling``: httpx reading the NDJSON lines without parsing them (what the stub can send);
- ``raw``: the official ``ollama`` client in a plain loop;
- ``runtime``: supervisor → session actor → worker (OllamaProvider) → lifeline → EventBus →
  a subscriber callback, counting the tokens in ``content_block_delta`` events (deltas are
  coalesced while the bus is behind, so the events may be fewer than the tokens).
Each side keeps one client (one connection pool) for all its trials, as the runtime keeps
its I/O loop's ``AsyncClient``: building an httpx client loads the TLS trust store (~17 ms
of CPU), which once cost every raw and ceiling trial, not the runtime's.
After one warm-up of each path, the trials are interleaved rounds (ceiling, raw, runtime,
then runtime, raw, ceiling, …; ``bench._paired``): each ratio is a paired ratio of two
trials run next to each other, reported as min/median/max, in wall time and in this
process's CPU time per token (the stub's CPU is its own process's: not counted).

    python -m bench.streaming [--quick] [--tokens N] [--trials K]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from pathlib import Path
from typing import Any

import httpx
import ollama

from bench._common import cli, loadavg, machine, median, now, quiet_logs
from bench._paired import Outcome, compare, interleave
from bench._runtime import create_sessions, real_runtime
from bench._stub_proc import BENCH_MODEL, StubProcess, prompt

GOAL_RATIO = 0.90
TRIAL_TIMEOUT_S = 300.0
WARMUP = 1


def _outcome(count: int, first: float, last: float, t0: float) -> Outcome:
    return Outcome(count, {"total_s": last - t0, "steady_s": last - first})


def ceiling_trial(client: httpx.Client, url: str, n: int) -> Outcome:
    t0 = now()
    count, first, last = 0, 0.0, 0.0
    body = {"model": BENCH_MODEL, "messages": [{"role": "user", "content": prompt(n)}]}
    with client.stream("POST", f"{url}/api/chat", json=body) as response:
        for line in response.iter_lines():
            if '"done": false' in line:
                count += 1
                last = now()
                first = first or last
    return _outcome(count, first, last, t0)


def raw_trial(client: ollama.Client, n: int) -> Outcome:
    t0 = now()
    count, first, last = 0, 0.0, 0.0
    for part in client.chat(model=BENCH_MODEL, messages=[{"role": "user", "content": prompt(n)}], stream=True):
        if part.message.content:
            count += 1
            last = now()
            first = first or last
    return _outcome(count, first, last, t0)


class RuntimeSide:
    """Each trial streams to a fresh session (start_process); the session is stopped
    between trials, untimed."""

    def __init__(self, runtime: Any, sids: list[str]) -> None:
        self.runtime, self.sids = runtime, list(sids)
        self.to_stop: list[tuple[str, Any]] = []

    def trial(self, n: int) -> Outcome:
        runtime, sid = self.runtime, self.sids.pop()
        done = threading.Event()
        seen = {"count": 0, "events": 0, "first": 0.0, "last": 0.0}

        def on_event(_sid: str, event: Any) -> None:
            if event.type == "content_block_delta":
                # deltas may arrive coalesced while the bus is behind: count the tokens
                seen["count"] += event.text.count("tok")
                seen["events"] += 1
                seen["last"] = now()
                seen["first"] = seen["first"] or seen["last"]
            elif event.type in ("result", "session_exited", "error"):
                done.set()

        runtime.subscribe(sid, on_event)
        self.to_stop.append((sid, on_event))
        t0 = now()
        runtime.start_process(sid, prompt(n))
        if not done.wait(TRIAL_TIMEOUT_S):
            raise RuntimeError("the runtime trial never finished")
        outcome = _outcome(int(seen["count"]), seen["first"], seen["last"], t0)
        outcome.extra["events"] = seen["events"]
        return outcome

    def cleanup(self) -> None:
        while self.to_stop:
            sid, callback = self.to_stop.pop()
            self.runtime.stop_process(sid)
            self.runtime.unsubscribe(sid, callback)


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    n = args.tokens or (5000 if args.quick else 30000)
    trials = args.trials or (3 if args.quick else 7)
    load_before = loadavg()
    with StubProcess() as url, tempfile.TemporaryDirectory() as tmp, httpx.Client(timeout=None) as http, \
            ollama.Client(host=url) as raw_client:
        runtime = real_runtime(url, Path(tmp), max_parallel=4)
        try:
            side = RuntimeSide(runtime, create_sessions(runtime, Path(tmp), trials + WARMUP))
            rows = interleave({"ceiling": lambda: ceiling_trial(http, url, n), "raw": lambda: raw_trial(raw_client, n),
                               "runtime": lambda: side.trial(n)},
                              trials=trials, warmup=WARMUP, between=side.cleanup)
        finally:
            runtime.shutdown()
    stats = {}
    for name, trials_ in rows.items():
        assert all(t.units == n for t in trials_), f"{name} lost tokens: {[t.units for t in trials_]}"
        stats[name] = {
            "tokens_per_s_total": round(median([t.units / t.extra["total_s"] for t in trials_])),
            "tokens_per_s_steady": round(median([t.units / t.extra["steady_s"] for t in trials_])),
            "cpu_us_per_token": round(median([t.per_unit("cpu") * 1e6 for t in trials_]), 1),
            "trials": [round(t.units / t.extra["total_s"]) for t in trials_],
        }
        if name == "runtime":  # how many delta events carried the tokens (coalesced under load)
            stats[name]["delta_events"] = [t.extra.get("events") for t in trials_]
    paired = [compare(rows, "raw", "runtime", kind="rate", label="runtime / raw ollama client, tokens/s",
                      goal=f"median ≥ {GOAL_RATIO}"),
              compare(rows, "ceiling", "raw", kind="rate", label="raw ollama client / unparsed httpx lines, tokens/s")]
    # judged on CPU time per token, the steady figure on a shared machine (both sides are
    # CPU-bound in this process: the stub has its own); the wall-time ratio is reported beside it
    ratio, wall = paired[0]["cpu"]["median"], paired[0]["wall"]["median"]
    return {
        "name": "streaming", "machine": machine(), "load_before": load_before,
        "tokens_per_trial": n, "trials": trials, "warmup": WARMUP, "stats": stats, "paired": paired,
        "ratio_total": wall, "ratio_cpu": ratio,
        "goal": f"runtime ≥ {GOAL_RATIO:.0%} of the raw client's tokens/s (paired median, CPU time per token)",
        "met": ratio >= GOAL_RATIO,
        "command": ".venv/bin/python -m bench.streaming",
    }


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=0)
    parser.add_argument("--trials", type=int, default=0)


if __name__ == "__main__":
    cli(run, _flags)
