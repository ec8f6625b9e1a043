"""Benchmark — idle memory: N sessions of which K active, after a daemon restart (issue 37).

N chat sessions left ``running`` by a dead process (each with a short conversation, as in
``bench.lifecycle``) come back through ``resume_pending_sessions()``: those that were only
waiting for their user come back passivated, without an actor (``[session]
passivate_after_s`` on, the default). Then K of them get a message each (a one-chunk reply
from the stub): they reactivate and stay live, idle, with an actor and a thread until
they passivate again. RSS is read after the runtime is built, after the resume and after
the K turns: KiB per passivated session, KiB per active session, and their sum for the
goal's shape — 100,000 sessions of which 10,000 active in ≤ 2 GiB — measured when run at
that size, else extrapolated from the measured per-session figures (said so).

With ``--trace`` the resume also runs under ``tracemalloc`` (slower; use a few thousand
sessions): the Python objects that stay live per passivated session, and where they were
allocated, against RSS — the difference is allocator pages the resume touched and kept.

    python -m bench.idle_memory [--sessions 100000] [--active 10000] [--trace]
    python -m bench.idle_memory --quick            # 2,000 of which 200 active
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench._common import (
    RESULT_MARKER,
    cli,
    loadavg,
    machine,
    now,
    os_threads,
    proc_status,
    quiet_logs,
    rss_bytes,
)

SESSIONS = 100_000
ACTIVE = 10_000
GOAL_BYTES = 2 * 2**30
#: shorter than the default 120 s: the active sessions passivate again within the run
PASSIVATE_AFTER_S = 20.0
LEVEL_TIMEOUT_S = 1800
ROOT = Path(__file__).resolve().parent.parent


def _mib(n: float) -> float:
    return round(n / 2**20, 1)


def _kib(n: float) -> float:
    return round(n / 1024, 2)


def rss_parts() -> dict[str, int]:
    """RssAnon and RssFile of this process (KiB): heap and stacks against mapped files."""
    return {key: proc_status("self", key) for key in ("RssAnon", "RssFile")}


def measure(n: int, active: int, trace: bool, passivate_after_s: float) -> dict[str, Any]:
    quiet_logs()
    from bench._runtime import Waiter, real_runtime
    from bench._stub_proc import StubProcess, prompt
    from bench.lifecycle import prepare

    out: dict[str, Any] = {"sessions": n, "active": active, "load_before": loadavg()}
    waiter = Waiter()
    with StubProcess() as url, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        ids = prepare(f"sqlite:///{workdir / 'corvid.db'}", workdir, n)
        runtime = real_runtime(url, workdir, max_parallel=1000, session={"passivate_after_s": passivate_after_s})
        try:
            runtime.subscribe_all(lambda _sid, event: waiter.bump(event.type))
            gc.collect()
            rss0, threads0, blocks0 = rss_bytes(), os_threads(), sys.getallocatedblocks()
            parts0 = rss_parts()
            if trace:
                tracemalloc.start(1)
            t0, cpu0 = now(), time.process_time()
            runtime.resume_pending_sessions()
            runtime.settle(LEVEL_TIMEOUT_S)
            resume_s, resume_cpu = now() - t0, time.process_time() - cpu0
            gc.collect()
            traced: dict[str, Any] = {}
            if trace:
                snapshot = tracemalloc.take_snapshot()
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                stats = snapshot.statistics("lineno")
                total = sum(s.size for s in stats)
                traced = {"traced_kib_per_passivated": _kib(total / n),
                          # the most the resume held at once: garbage not yet collected included
                          "traced_peak_kib_per_session": _kib(peak / n),
                          "traced_top": [f"{s.traceback[0].filename.split('corvid_actors/')[-1]}:"
                                         f"{s.traceback[0].lineno} {_kib(s.size / n)} KiB"
                                         for s in stats[:8]]}
            rss1, threads1, blocks1 = rss_bytes(), os_threads(), sys.getallocatedblocks()
            parts1 = rss_parts()
            passivated = runtime.internals.live.passivated_count()
            t1 = now()
            for sid in ids[:active]:
                runtime.send_message(sid, prompt(1))
            answered = waiter.wait("result", active, LEVEL_TIMEOUT_S)
            runtime.settle(LEVEL_TIMEOUT_S)
            active_s = now() - t1
            gc.collect()
            rss2, threads2 = rss_bytes(), os_threads()
            live = len(runtime.internals.live)
            # the active ones passivate again after passivate_after_s: what an actor that was
            # built and dropped leaves behind, against a session passivated at start-up
            deadline = now() + passivate_after_s + 60
            while active and runtime.internals.live.passivated_count() < n and now() < deadline:
                time.sleep(1.0)
            runtime.settle(LEVEL_TIMEOUT_S)
            gc.collect()
            rss3, threads3 = rss_bytes(), os_threads()
            repassivated = active - len(runtime.internals.live)
            # diagnosis: what glibc gives back of its free heap pages (kept: fragmentation)
            blocks3 = sys.getallocatedblocks()
            trimmed = ctypes.CDLL("libc.so.6").malloc_trim(0) if sys.platform == "linux" else 0
            rss4 = rss_bytes()
        finally:
            runtime.shutdown(settle_timeout_s=600)
    per_passivated = (rss1 - rss0) / max(n, 1)
    per_active = (rss2 - rss1) / max(active, 1)  # on top of its passivated share
    at_goal = rss0 + SESSIONS * per_passivated + ACTIVE * per_active
    out.update({
        "passivated_after_resume": passivated, "live_after_messages": live, "answered": answered,
        "resume_s": round(resume_s, 2), "resume_cpu_s": round(resume_cpu, 2), "activate_s": round(active_s, 2),
        "rss_mib_base": _mib(rss0), "rss_mib_resumed": _mib(rss1), "rss_mib_active": _mib(rss2),
        "rss_kib_per_passivated": _kib(per_passivated), "rss_kib_per_active": _kib(per_active),
        "rss_anon_kib_per_passivated": round((parts1["RssAnon"] - parts0["RssAnon"]) / max(n, 1), 2),
        "rss_file_kib_per_passivated": round((parts1["RssFile"] - parts0["RssFile"]) / max(n, 1), 2),
        "blocks_per_passivated": round((blocks1 - blocks0) / max(n, 1), 1),
        "threads": [threads0, threads1, threads2, threads3],
        "repassivated": repassivated, "rss_mib_repassivated": _mib(rss3),
        # per session that had an actor and passivated again, above its start-up share
        "rss_kib_kept_per_repassivated": _kib((rss3 - rss1) / max(active, 1)),
        "blocks_kept_per_repassivated": round((blocks3 - blocks1) / max(active, 1), 1),
        "rss_kib_kept_per_repassivated_after_malloc_trim": _kib((rss4 - rss1) / max(active, 1)),
        "malloc_trim_released": bool(trimmed),
        "rss_mib_100k_10k": _mib(at_goal),
        "rss_100k_10k_is": "measured" if (n, active) == (SESSIONS, ACTIVE) else (
            f"extrapolated: base + 100,000 × {_kib(per_passivated)} KiB + 10,000 × {_kib(per_active)} KiB"),
        "goal_met": at_goal <= GOAL_BYTES, **traced, "load_after": loadavg(),
    })
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    n = args.sessions or (2000 if args.quick else SESSIONS)
    active = args.active if args.active is not None else (200 if args.quick else min(ACTIVE, n // 10))
    if args.here:
        return measure(n, active, args.trace, args.passivate_after)
    cmd = [sys.executable, "-m", "bench.idle_memory", "--here", "--sessions", str(n), "--active", str(active),
           "--passivate-after", str(args.passivate_after)]
    done = subprocess.run([*cmd, *(["--trace"] if args.trace else [])], cwd=ROOT, capture_output=True,
                          text=True, timeout=LEVEL_TIMEOUT_S + 600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_MARKER)]
    result = json.loads(lines[-1][len(RESULT_MARKER):]) if lines else {
        "error": f"level process failed (exit {done.returncode}): {done.stderr[-800:]}"}
    return {"name": "idle_memory", "machine": machine(), "result": result,
            "goal": "100,000 sessions of which 10,000 active in ≤ 2 GiB RSS",
            "command": " ".join(["python -m bench.idle_memory", "--sessions", str(n), "--active", str(active)])}


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=0, help=f"sessions (default {SESSIONS:,})")
    parser.add_argument("--active", type=int, default=None, help=f"of which active (default {ACTIVE:,})")
    parser.add_argument("--trace", action="store_true", help="tracemalloc during the resume (slow)")
    parser.add_argument("--passivate-after", type=float, default=PASSIVATE_AFTER_S,
                        help="[session] passivate_after_s (s): how long the active ones stay live")
    parser.add_argument("--here", action="store_true", help="measure in this process (JSON out)")


if __name__ == "__main__":
    cli(run, _flags)
