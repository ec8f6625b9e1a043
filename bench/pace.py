"""Benchmark 0 — streaming at a model's pace: CPU and context switches per token, runtime vs raw clients.

A real model streams a few dozen to a thousand tokens a second, one token per network
write; at that pace a reader's cost is not its parser's speed (``bench.streaming`` measures
that, with a stub that writes as fast as it can) but what each *arrival* costs: the wake-up
of the thread that reads it, the hops it takes to reach its consumer, the GIL hand-offs.
The stub (its own process, ``bench._stub_proc``) writes one stamped token per network
write on an absolute schedule, and three readers in this process read the same replies:

- ``sync``: the official ``ollama.Client``, one thread per stream (a plain loop over
  ``client.chat(stream=True)``: each line parsed into an ``ollama.ChatResponse``);
- ``async``: the official ``ollama.AsyncClient``, every stream a task on one asyncio loop
  (each line parsed into an ``ollama.ChatResponse``): the least a Python process does;
- ``runtime``: live chat sessions of one real-clock Runtime (created and answered once,
  before the trials) each sent a message (``send_message``: stored, a turn, the reply
  stored); a ``subscribe_all`` callback receives the ``content_block_delta`` events;
- ``runtime_no_pump``: the same with ``[supervisor] delta_interval_ms = 0`` (each delta
  told to the bus as it comes, as before issue 37's delta pump), paired with ``runtime``.

Every reader parses the JSON it reads (the runtime's lean parse of a plain text line is
its own: ``providers/_ollama_lean``). Levels: one stream at 1 token/ms; 100 streams at
50 tokens/s each (issue 37); ``--streams 1000`` adds 1,000 at 50 tokens/s (or
``--rate-1000``: the 2-core machine may not sustain 50,000 tokens/s — the output says
what was offered and what was delivered). Per level, after one warm-up trial of each
reader, ``--trials`` (≥ 7) interleaved rounds (``bench._paired``): per trial this
process's CPU µs per token (``time.process_time`` + reaped children; the stub's CPU is
its own process's) and context switches per token (``ru_nvcsw + ru_nivcsw`` of
``RUSAGE_SELF``: every thread), and the stub → reader latency p50/p99 (the stub stamps
each token with CLOCK_MONOTONIC). The ratios are paired per round: runtime / async and
runtime / sync in CPU per token (goal: runtime ≤ 1.1 × async, and fewer context switches
than tokens).

    python -m bench.pace [--quick] [--trials 7] [--streams 1 100 [1000]] [--rate-1000 50] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import ollama

from bench._common import cli, loadavg, machine, percentile, quiet_logs
from bench._paired import Outcome, Trial, compare, interleave, spread
from bench._runtime import Waiter, create_sessions, real_runtime
from bench._stub_proc import BENCH_MODEL, StubProcess, prompt

TRIALS = 7
#: (streams, tokens per second per stream) of the default levels: one stream at 1 token/ms,
#: a hundred at a chat model's 50 tokens/s
LEVELS = ((1, 1000.0), (100, 50.0))
RATE_1000 = 50.0
#: how long each stream lasts, seconds (one stream at 1 token/ms: 2 s, 2,000 tokens)
STREAM_S = {1: 2.0}
DEFAULT_STREAM_S = 3.0
#: above this many streams the sync client's thread per stream is left out (1,000 threads)
SYNC_MAX_STREAMS = 100
GOAL_CPU_RATIO = 1.1
#: a reply longer than this many tokens gets a fresh session per trial (see RuntimeSide)
HISTORY_TOKENS = 500
TRIAL_TIMEOUT_S = 600.0
UNLIMITED = httpx.Limits(max_connections=None, max_keepalive_connections=None)


class Reader:
    """One trial's tokens: each token's stub → reader latency (the stub's stamp)."""

    def __init__(self) -> None:
        self.latencies_ns: list[int] = []
        self.deltas = 0

    def text(self, text: str) -> None:
        t = time.monotonic_ns()
        self.deltas += 1
        # list.extend of a list is atomic under the GIL: the sync readers' threads share it
        self.latencies_ns.extend([t - int(s) for s in text.split() if s.isdigit()])

    def outcome(self, expected: int) -> Outcome:
        lat = self.latencies_ns
        return Outcome(len(lat), {
            "tokens": len(lat), "expected": expected, "deltas": self.deltas,
            "latency_ms_p50": round(percentile(lat, 50) / 1e6, 2) if lat else float("nan"),
            "latency_ms_p99": round(percentile(lat, 99) / 1e6, 2) if lat else float("nan"),
        })


def _messages(chunks: int, rate: float) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt(chunks, 1 / rate, stamp=True)}]


class SyncSide:
    """``ollama.Client`` (one, thread-safe, pool unbounded), one thread per stream."""

    def __init__(self, url: str) -> None:
        self.client = ollama.Client(host=url, timeout=None, limits=UNLIMITED)

    def trial(self, streams: int, rate: float, chunks: int) -> Outcome:
        reader = Reader()

        def one() -> None:
            for part in self.client.chat(model=BENCH_MODEL, messages=_messages(chunks, rate), stream=True):
                if part.message.content:
                    reader.text(part.message.content)

        threads = [threading.Thread(target=one, daemon=True) for _ in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TRIAL_TIMEOUT_S)
        return reader.outcome(streams * chunks)

    def close(self) -> None:
        self.client._client.close()


class AsyncSide:
    """``ollama.AsyncClient`` on one asyncio loop, kept across trials (as the runtime keeps
    its I/O loop's client): every stream a task."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(self._make(url))

    @staticmethod
    async def _make(url: str) -> ollama.AsyncClient:
        return ollama.AsyncClient(host=url, timeout=None, limits=UNLIMITED)

    def trial(self, streams: int, rate: float, chunks: int) -> Outcome:
        reader = Reader()

        async def one() -> None:
            parts = await self.client.chat(model=BENCH_MODEL, messages=_messages(chunks, rate), stream=True)
            async for part in parts:
                if part.message.content:
                    reader.text(part.message.content)

        async def main() -> None:
            await asyncio.wait_for(asyncio.gather(*(one() for _ in range(streams))), TRIAL_TIMEOUT_S)

        self.loop.run_until_complete(main())
        return reader.outcome(streams * chunks)

    def close(self) -> None:
        self.loop.run_until_complete(self.client._client.aclose())
        self.loop.close()


class RuntimeSide:
    """Live chat sessions of one runtime, answered once before the trials; each trial
    sends ``streams`` of them a message and waits for every ``result``.

    A long reply stays in its session's history: 2,000 stamped tokens a turn would
    overflow the bench model's context window within a few trials, and the benchmark
    would measure the overflow recovery instead of the stream. So with ``sets`` > 1 each
    trial uses the next set of ``streams`` sessions (all made and answered beforehand)."""

    def __init__(self, url: str, workdir: Path, streams: int, sets: int = 1,
                 supervisor: dict[str, Any] | None = None) -> None:
        self.waiter = Waiter()
        self.reader = Reader()
        workdir.mkdir(exist_ok=True)
        self.runtime = real_runtime(url, workdir, max_parallel=max(4, streams), supervisor=supervisor)
        every = create_sessions(self.runtime, workdir, streams * sets)
        self.sets = [every[k * streams:(k + 1) * streams] for k in range(sets)]
        self.turn = 0
        self.runtime.subscribe_all(self._on_event)
        for sid in every:
            self.runtime.start_process(sid, prompt(1))
        if not self.waiter.wait("result", len(every), TRIAL_TIMEOUT_S):
            raise RuntimeError("the sessions did not answer their first prompt")
        self.runtime.settle(TRIAL_TIMEOUT_S)

    def _on_event(self, _sid: str, event: Any) -> None:
        if event.type == "content_block_delta":
            self.reader.text(event.text)
        elif event.type == "result":
            self.waiter.bump("result")

    def trial(self, streams: int, rate: float, chunks: int) -> Outcome:
        self.reader = reader = Reader()
        results = self.waiter.counts.get("result", 0)
        text = prompt(chunks, 1 / rate, stamp=True)
        sids = self.sets[self.turn % len(self.sets)]
        self.turn += 1
        for sid in sids:
            self.runtime.send_message(sid, text)
        if not self.waiter.wait("result", results + len(sids), TRIAL_TIMEOUT_S):
            raise RuntimeError("the runtime's streams did not finish")
        outcome = reader.outcome(streams * chunks)
        self.runtime.settle(TRIAL_TIMEOUT_S)  # the replies stored: inside the timed trial
        return outcome

    def close(self) -> None:
        self.runtime.shutdown(settle_timeout_s=600)


def _per_token(trials: list[Trial], key: str) -> float:
    return round(statistics.median([float(t.extra[key]) / t.units for t in trials if t.units]), 3)


def run_level(url: str, streams: int, rate: float, seconds: float, trials: int, sync: bool,
              compare_pump: bool = False) -> dict[str, Any]:
    chunks = max(2, round(rate * seconds))
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        # a session's history stays under ~1,000 stamped tokens (see RuntimeSide)
        sets = trials + 1 if chunks > HISTORY_TOKENS else 1
        runtime = RuntimeSide(url, Path(tmp) / "pumped", streams, sets)
        setup_s = round(time.monotonic() - t0, 1)
        # the same runtime with the delta pump off (issue 37 item 3's before, paired)
        no_pump = RuntimeSide(url, Path(tmp) / "no-pump", streams, sets, {"delta_interval_ms": 0.0}) if compare_pump \
            else None
        async_side = AsyncSide(url)
        sync_side = SyncSide(url) if sync else None
        sides = {"async": lambda: async_side.trial(streams, rate, chunks),
                 "runtime": lambda: runtime.trial(streams, rate, chunks)}
        if sync_side is not None:
            sides = {"sync": lambda: sync_side.trial(streams, rate, chunks), **sides}
        if no_pump is not None:
            sides["runtime_no_pump"] = lambda: no_pump.trial(streams, rate, chunks)
        try:
            rows = interleave(sides, trials=trials, warmup=1)
        finally:
            runtime.close()
            if no_pump is not None:
                no_pump.close()
            async_side.close()
            if sync_side is not None:
                sync_side.close()
    label = f"{streams:,} stream{'s' if streams > 1 else ''} × {rate:g} tok/s"
    readers: dict[str, Any] = {}
    for name, ts in rows.items():
        readers[name] = {
            "cpu_us_per_token": round(statistics.median([t.per_unit("cpu") for t in ts]) * 1e6, 1),
            "cpu_us_per_token_spread": spread([t.per_unit("cpu") * 1e6 for t in ts], 1),
            "csw_per_token": _per_token(ts, "csw"),
            "deltas_per_token": _per_token(ts, "deltas"),
            "delivered_tokens_per_s": round(statistics.median([t.units / t.wall_s for t in ts])),
            "latency_ms_p50": spread([t.extra["latency_ms_p50"] for t in ts], 2),
            "latency_ms_p99": spread([t.extra["latency_ms_p99"] for t in ts], 2),
            "lost": sum(t.extra["expected"] - t.extra["tokens"] for t in ts),
        }
    paired = [compare(rows, "async", "runtime", kind="cost", label=f"{label}: runtime / raw AsyncClient, time per token",
                      goal=f"CPU median ≤ {GOAL_CPU_RATIO}")]
    if sync:
        paired += [compare(rows, "sync", "runtime", kind="cost", label=f"{label}: runtime / raw sync Client, time per token"),
                   compare(rows, "sync", "async", kind="cost", label=f"{label}: raw AsyncClient / raw sync Client, "
                                                                    "time per token")]
    if compare_pump:
        paired.append(compare(rows, "runtime_no_pump", "runtime", kind="cost",
                              label=f"{label}: runtime / the same with delta_interval_ms = 0 (no delta pump), "
                                    "time per token"))
    return {"streams": streams, "rate_per_stream": rate, "offered_tokens_per_s": round(streams * rate),
            "tokens_per_stream": chunks, "runtime_setup_s": setup_s, "readers": readers, "paired": paired,
            "load_before": load_before, "load_after": loadavg()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    trials = args.trials or (3 if args.quick else TRIALS)
    wanted = args.streams or [n for n, _ in LEVELS]
    levels = [(n, dict(LEVELS).get(n, args.rate_1000 if n >= 1000 else 50.0)) for n in wanted]
    if args.quick:
        levels = [(n, r) for n, r in levels if n <= 100]
    load_before = loadavg()
    out: list[dict[str, Any]] = []
    with StubProcess() as url:
        for n, rate in levels:
            seconds = args.seconds or STREAM_S.get(n, DEFAULT_STREAM_S)
            if args.quick:
                seconds = min(seconds, 1.0)
            out.append(run_level(url, n, rate, seconds, trials, sync=n <= SYNC_MAX_STREAMS,
                                 compare_pump=not args.no_pump_side))
    head = out[0]
    ratio = head["paired"][0]["cpu"]["median"]
    csw = head["readers"]["runtime"]["csw_per_token"]
    return {
        "name": "pace", "machine": machine(), "load_before": load_before, "trials": trials, "levels": out,
        "paired": [c for lv in out for c in lv["paired"]],
        "goal": f"at 1 token/ms: runtime CPU per token ≤ {GOAL_CPU_RATIO} × the raw AsyncClient's (paired median) "
                "and fewer context switches than tokens",
        "met": bool(ratio <= GOAL_CPU_RATIO and csw < 1.0),
        "command": ".venv/bin/python -m bench.pace",
    }


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=0, help=f"paired rounds per level (default {TRIALS})")
    parser.add_argument("--streams", type=int, nargs="*", help="levels: 1 (1 token/ms), 100, 1000 (default 1 100)")
    parser.add_argument("--rate-1000", type=float, default=RATE_1000,
                        help="tokens/s per stream at 1,000 streams (default 50)")
    parser.add_argument("--seconds", type=float, default=0.0, help="how long each stream lasts")
    parser.add_argument("--no-pump-side", action="store_true",
                        help="leave out the runtime with the delta pump off (delta_interval_ms = 0; an older tree "
                             "without the key needs this)")


if __name__ == "__main__":
    cli(run, _flags)
