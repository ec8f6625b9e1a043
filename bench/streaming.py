"""Benchmark 1 — streaming overhead: tokens/s to a subscriber through the runtime vs the raw client.

The same stub (in its own process) streams the same reply of N one-word chunks to:
- ``ceiling``: httpx reading the NDJSON lines without parsing them (what the stub can send);
- ``raw``: the official ``ollama`` client in a plain loop;
- ``runtime``: supervisor → session actor → worker (OllamaProvider) → lifeline → EventBus →
  a subscriber callback, counting ``content_block_delta`` events.
Trials alternate raw/runtime so that load drifts hit both alike. Rates are medians; the
CPU time this process spent per token (both sides share the stub) is reported too.

    python -m bench.streaming [--quick] [--tokens N] [--trials K]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import ollama

from bench._common import cli, loadavg, machine, median, now, quiet_logs
from bench._runtime import create_sessions, real_runtime
from bench._stub_proc import BENCH_MODEL, StubProcess, prompt

GOAL_RATIO = 0.90
TRIAL_TIMEOUT_S = 300.0


def _trial(fn: Any) -> dict[str, float]:
    cpu0, t0 = time.process_time(), now()
    tokens, first, last = fn(t0)
    return {"tokens": tokens, "total_s": last - t0, "steady_s": last - first,
            "cpu_s": time.process_time() - cpu0}


def ceiling_trial(url: str, n: int) -> dict[str, float]:
    def run(t0: float) -> tuple[int, float, float]:
        count, first, last = 0, 0.0, 0.0
        body = {"model": BENCH_MODEL, "messages": [{"role": "user", "content": prompt(n)}]}
        with httpx.stream("POST", f"{url}/api/chat", json=body, timeout=None) as response:
            for line in response.iter_lines():
                if '"done": false' in line:
                    count += 1
                    last = now()
                    first = first or last
        return count, first, last
    return _trial(run)


def raw_trial(url: str, n: int) -> dict[str, float]:
    def run(t0: float) -> tuple[int, float, float]:
        client = ollama.Client(host=url)
        count, first, last = 0, 0.0, 0.0
        for part in client.chat(model=BENCH_MODEL, messages=[{"role": "user", "content": prompt(n)}],
                                stream=True):
            if part.message.content:
                count += 1
                last = now()
                first = first or last
        client.close()
        return count, first, last
    return _trial(run)


def runtime_trial(runtime: Any, sid: str, n: int) -> dict[str, float]:
    done = threading.Event()
    seen = {"count": 0, "first": 0.0, "last": 0.0}

    def on_event(_sid: str, event: Any) -> None:
        if event.type == "content_block_delta":
            seen["count"] += 1
            seen["last"] = now()
            seen["first"] = seen["first"] or seen["last"]
        elif event.type in ("result", "session_exited", "error"):
            done.set()

    runtime.subscribe(sid, on_event)

    def run(t0: float) -> tuple[int, float, float]:
        runtime.start_process(sid, prompt(n))
        if not done.wait(TRIAL_TIMEOUT_S):
            raise RuntimeError("the runtime trial never finished")
        return int(seen["count"]), seen["first"], seen["last"]

    result = _trial(run)
    runtime.stop_process(sid)
    runtime.unsubscribe(sid, on_event)
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    n = args.tokens or (5000 if args.quick else 30000)
    trials = args.trials or (2 if args.quick else 5)
    load_before = loadavg()
    rows: dict[str, list[dict[str, float]]] = {"ceiling": [], "raw": [], "runtime": []}
    with StubProcess() as url, tempfile.TemporaryDirectory() as tmp:
        runtime = real_runtime(url, Path(tmp), max_parallel=4)
        try:
            sids = create_sessions(runtime, Path(tmp), trials + 1)
            raw_trial(url, 200)  # warm-up: imports, connection paths, model info cache
            runtime_trial(runtime, sids[-1], 200)
            for k in range(trials):
                rows["ceiling"].append(ceiling_trial(url, n))
                rows["raw"].append(raw_trial(url, n))
                rows["runtime"].append(runtime_trial(runtime, sids[k], n))
        finally:
            runtime.shutdown()
    stats = {}
    for name, trials_ in rows.items():
        assert all(t["tokens"] == n for t in trials_), f"{name} lost tokens: {[t['tokens'] for t in trials_]}"
        stats[name] = {
            "tokens_per_s_total": round(median([t["tokens"] / t["total_s"] for t in trials_])),
            "tokens_per_s_steady": round(median([t["tokens"] / t["steady_s"] for t in trials_])),
            "cpu_us_per_token": round(median([t["cpu_s"] / t["tokens"] * 1e6 for t in trials_]), 1),
            "trials": [round(t["tokens"] / t["total_s"]) for t in trials_],
        }
    ratio = stats["runtime"]["tokens_per_s_total"] / stats["raw"]["tokens_per_s_total"]
    steady = stats["runtime"]["tokens_per_s_steady"] / stats["raw"]["tokens_per_s_steady"]
    return {
        "name": "streaming", "machine": machine(), "load_before": load_before,
        "tokens_per_trial": n, "trials": trials, "stats": stats,
        "ratio_total": round(ratio, 3), "ratio_steady": round(steady, 3),
        "goal": f"runtime ≥ {GOAL_RATIO:.0%} of the raw client's tokens/s", "met": ratio >= GOAL_RATIO,
        "command": ".venv/bin/python -m bench.streaming",
    }


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=0)
    parser.add_argument("--trials", type=int, default=0)


if __name__ == "__main__":
    cli(run, _flags)
