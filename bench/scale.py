"""Benchmark 3 — scale: 100, 1,000 and 10,000 live session actors on one runtime.

Each level runs in its own process (clean RSS and thread counts) against the stub in
another process. Phase A starts every session with a prompt (a one-chunk reply); the
session then stays alive, idle, waiting for a user message: start-up time, RSS and OS
threads per live session. Phase B sends ``min(N, STREAMS)`` of them a message at once and
the stub streams ``STREAM_CHUNKS`` stamped chunks, ``STREAM_DELAY_S`` apart, to each:
peak threads, the most streams open at once, and the p50/p99 latency from the stub
writing a chunk to the subscriber callback receiving it.

Scale reports capacities per level (RSS, threads, start-up per live session), not a
comparison of two ways of doing one thing: nothing here is paired. The runtime against a
raw client at many streams, paired, is ``bench.streams``.

    python -m bench.scale [--quick] [--levels 100 1000 10000] [--level N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from bench._common import (
    RESULT_MARKER,
    Sampler,
    cli,
    loadavg,
    machine,
    now,
    os_threads,
    percentile,
    quiet_logs,
    rss_bytes,
)
from bench._runtime import Waiter, create_sessions, real_runtime
from bench._stub_proc import StubProcess, prompt

LEVELS = (100, 1000)
#: the 10,000 level is opt-in (``--levels 100 1000 10000``): start-up alone takes minutes here
FULL_LEVELS = (100, 1000, 10000)
STREAMS = 1000
#: phase B replies: long enough that all STREAMS streams overlap while the messages go out
STREAM_CHUNKS = 40
STREAM_DELAY_S = 0.5
#: latency "steady" = chunks arriving this long after the last message went out
STEADY_AFTER_S = 2.0
GOAL_RSS_BYTES = 2 * 2**30
LEVEL_TIMEOUT_S = 1800


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """Most intervals open at one instant."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    best = current = 0
    for _, step in edges:
        current += step
        best = max(best, current)
    return best


def _steady(latencies: list[float], arrivals: list[float], after: float) -> dict[str, Any]:
    """Latency of the chunks that arrived once every message had gone out (no ramp-up)."""
    steady = [lat for lat, at in zip(latencies, arrivals, strict=True) if at >= after]
    return {"steady_deltas": len(steady), "steady_latency_ms_p50": round(percentile(steady, 50), 1),
            "steady_latency_ms_p99": round(percentile(steady, 99), 1)}


class GcWatch:
    """Time the cyclic garbage collector spends, per generation (collections stop every thread)."""

    def __init__(self) -> None:
        import gc

        self.seconds = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._t0 = 0.0
        self._gc = gc

    def __enter__(self) -> GcWatch:
        self._gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        self._gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = now()
        else:
            self.seconds[info["generation"]] += now() - self._t0
            self.count[info["generation"]] += 1


def measure_level(n: int) -> dict[str, Any]:
    """Phase A: start ``n`` sessions (a one-chunk reply each) and count what the live, idle
    sessions cost. Phase B: send ``min(n, STREAMS)`` of them a message at once and measure
    stub → subscriber latency while the stub streams to all of them."""
    quiet_logs()
    import time

    waiter = Waiter()
    latencies: list[float] = []
    arrivals: list[float] = []
    spans: dict[str, list[float]] = {}
    lat_lock = threading.Lock()

    def on_event(sid: str, event: Any) -> None:
        if event.type == "content_block_delta" and event.text.strip().isdigit():
            t = time.monotonic_ns()
            with lat_lock:
                latencies.append((t - int(event.text)) / 1e6)
                arrivals.append(t / 1e9)
                span = spans.setdefault(sid, [t / 1e9, t / 1e9])
                span[1] = t / 1e9
        waiter.bump(event.type)

    out: dict[str, Any] = {"sessions": n, "load_before": loadavg()}
    with StubProcess() as url, tempfile.TemporaryDirectory() as tmp:
        runtime = real_runtime(url, Path(tmp), max_parallel=STREAMS)
        try:
            sids = create_sessions(runtime, Path(tmp), n + 1)
            warm, sids = sids[-1], sids[:-1]
            runtime.subscribe_all(on_event)
            runtime.start_process(warm, prompt(1))
            assert waiter.wait("result", 1, 60), "warm-up session never answered"
            runtime.stop_process(warm)
            runtime.settle(60)
            rss0, threads0 = rss_bytes(), os_threads()
            started, error = 0, ""
            t0 = now()
            try:
                for sid in sids:
                    runtime.start_process(sid, prompt(1))
                    started += 1
            except Exception as exc:  # noqa: BLE001 - where it breaks is the result
                error = f"{type(exc).__name__}: {exc}"
            startup_s = now() - t0
            replies_ok = waiter.wait("result", started + 1, LEVEL_TIMEOUT_S)
            runtime.settle(600)
            live = len(runtime.get_active_session_ids())
            rss1, threads1 = rss_bytes(), os_threads()
            # phase B: the stub streams to min(n, STREAMS) sessions at once
            streamers = sids[:min(started, STREAMS)]
            results_before = waiter.counts.get("result", 0)
            with Sampler() as sampler, GcWatch() as gc_watch:
                cpu1 = time.process_time()
                t1 = now()
                for sid in streamers:
                    runtime.send_message(sid, prompt(STREAM_CHUNKS, STREAM_DELAY_S, stamp=True))
                send_s = now() - t1
                sent_all = now()
                streams_ok = waiter.wait("result", results_before + len(streamers), LEVEL_TIMEOUT_S)
                stream_phase_s = now() - t1
                stream_cpu_s = time.process_time() - cpu1
            t2 = now()
        finally:
            runtime.shutdown(settle_timeout_s=600)
        shutdown_s = now() - t2
    out.update({
        "started": started, "error": error, "live_sessions": live, "replies_complete": replies_ok,
        "startup_s": round(startup_s, 2), "startup_ms_per_session": round(startup_s / max(started, 1) * 1e3, 2),
        "rss_mib_before": round(rss0 / 2**20, 1), "rss_mib_live": round(rss1 / 2**20, 1),
        "rss_kib_per_session": round((rss1 - rss0) / max(live, 1) / 1024, 1),
        "threads_before": threads0, "threads_live": threads1,
        "threads_per_session": round((threads1 - threads0) / max(live, 1), 2),
        "streamers": len(streamers), "streams_complete": streams_ok, "send_s": round(send_s, 2),
        "max_concurrent_streams": max_overlap([(v[0], v[1]) for v in spans.values()]),
        "peak_threads_streaming": sampler.peak_threads, "peak_rss_mib_streaming": round(sampler.peak_rss / 2**20, 1),
        "deltas": len(latencies),
        # CPU of this process (all threads) per chunk delivered, sends included
        "cpu_us_per_delta": round(stream_cpu_s / max(len(latencies), 1) * 1e6, 1),
        "gc_s_phase_b": [round(x, 2) for x in gc_watch.seconds], "gc_count_phase_b": gc_watch.count,
        **_steady(latencies, arrivals, sent_all + STEADY_AFTER_S),
        "latency_ms_p50": round(percentile(latencies, 50), 1),
        "latency_ms_p99": round(percentile(latencies, 99), 1),
        "latency_ms_max": round(max(latencies, default=float("nan")), 1),
        "offered_chunks_per_s": round(len(streamers) / STREAM_DELAY_S),
        "delivered_chunks_per_s": round(len(latencies) / max(stream_phase_s, 1e-9)),
        "shutdown_s": round(shutdown_s, 2), "load_after": loadavg(),
    })
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.level:
        return measure_level(args.level)
    levels = tuple(args.levels) if args.levels else ((100,) if args.quick else LEVELS)
    results = []
    for n in levels:
        done = subprocess.run([sys.executable, "-m", "bench.scale", "--level", str(n)], capture_output=True,
                              text=True, timeout=LEVEL_TIMEOUT_S + 600)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_MARKER)]
        if lines:
            results.append(json.loads(lines[-1][len(RESULT_MARKER):]))
        else:
            results.append({"sessions": n, "error": f"level process failed (exit {done.returncode}): "
                                                     f"{done.stderr[-600:]}"})
    top = results[-1]
    rss_top = top.get("rss_mib_live", float("nan")) * 2**20
    return {
        "name": "scale", "machine": machine(), "levels": results,
        "streams": STREAMS, "chunks": STREAM_CHUNKS, "delay_s": STREAM_DELAY_S,
        "goal": "10,000 live sessions in ≤ 2 GiB RSS",
        # judged only when the 10,000 level ran (opt-in)
        "met": (bool(top.get("live_sessions") == 10000 and rss_top <= GOAL_RSS_BYTES)
                if top.get("sessions") == 10000 else None),
        "command": ".venv/bin/python -m bench.scale   (10,000: --levels 100 1000 10000; one level: --level N)",
    }


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--level", type=int, default=0, help="run one level in this process (JSON out)")
    parser.add_argument("--levels", type=int, nargs="*", help=f"levels, each in its own process (default {LEVELS}; "
                                                               f"all: {FULL_LEVELS})")


if __name__ == "__main__":
    cli(run, _flags)
