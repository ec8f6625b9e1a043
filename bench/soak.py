"""Benchmark 8 — soak: does a long-running daemon stay flat under endless session churn?

A real ``corvid-actors serve`` subprocess, driven only through its admin socket: ``--live``
lanes each start a session (``admin start``), wait for its reply, send two more messages
(waiting for each reply), stop it, and start the next, until ``--sessions`` sessions have
been through. The model server runs in another process (``--provider ollama``: the stub
Ollama server of ``bench._stub_proc``, as a real Ollama would) or inside the daemon
(``--provider stub``: the daemon's built-in stub, the README's first command). Every
``--sample-every`` sessions the daemon's RSS, OS threads, open file descriptors and database
size (with its WAL) are read from ``/proc`` and the data directory; the daemon's timer and
table sizes are read with ``admin stats``.

The figure is the least-squares slope of RSS per 1,000 sessions after the first
``--warm-up`` (2,000) — warm-up fills what is bounded (recent-event rings, the stub's ring,
allocator arenas, SQLite's page cache). Goal: ≤ 0.2 MiB per 1,000 sessions for both model
servers, threads and file descriptors flat.

    python -m bench.soak [--quick] [--sessions N] [--live N] [--provider ollama|stub|both] [--sequential] [--record]

With both model servers (the default) the two soaks run at the same moment, each its own
daemon, so that both see the same load (``--sequential``: one after the other); their
daemons' CPU per churned session is reported as one pair. Replies are followed with one
``admin follow`` connection for all sessions. ``--record``
merges the result into ``bench/results.json`` and re-renders ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._common import RESULT_MARKER, loadavg, machine, proc_cpu_s, proc_status, slope
from bench._paired import Trial, compare
from bench._stub_proc import BENCH_MODEL, StubProcess
from corvid_actors.daemon.client import AdminClient, AdminRequestFailed

GOAL_MIB_PER_1000 = 0.2
DEFAULT_SESSIONS = 20_000
DEFAULT_LIVE = 50
DEFAULT_WARM_UP = 2_000
DEFAULT_SAMPLE_EVERY = 500
#: the agent of every churned session
AGENT = "soak"
#: messages per session: the start prompt and two more (each waits for its reply)
MESSAGES_PER_SESSION = 3
#: bounded waits (a loaded 2-core machine; a reply normally takes milliseconds)
READY_S = 60.0
REPLY_S = 60.0
ROOT = Path(__file__).resolve().parent.parent

CONFIG = """
[slots]
max_parallel = 1000
[daemon]
stub_reply = "soak reply"
stub_chunks = 4
stub_chunk_delay_s = 0.0
log_level = "WARNING"
admin_max_connections = {connections}
"""


# --- the daemon process --------------------------------------------------------------------------


def _db_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.glob("*.db*") if p.is_file())


@contextmanager
def daemon(data_dir: Path, provider: str, ollama_url: str | None, live: int) -> Iterator[subprocess.Popen[bytes]]:
    config = data_dir.parent / "soak.toml"
    # the stub process knows only the bench model; the built-in stub knows the default one
    models = f'[providers]\nollama_default_model = "{BENCH_MODEL}"\n' if provider == "ollama" else ""
    # one connection per lane, the follower, the sampler and room for an operator
    config.write_text(CONFIG.format(connections=live + 8) + models)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OLLAMA_", "CORVID_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if ollama_url:
        env["OLLAMA_HOST"] = ollama_url
    log = open(data_dir.parent / "daemon.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "corvid_actors", "serve", "--data-dir", str(data_dir),
                             "--provider", "stub" if provider == "stub" else "ollama", "--config", str(config)],
                            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=ROOT)
    try:
        deadline = time.monotonic() + READY_S
        while True:  # the socket answers once the daemon is ready
            if proc.poll() is not None:
                raise RuntimeError(f"the daemon exited ({proc.returncode}): see {log.name}")
            try:
                with AdminClient(data_dir / "admin.sock", timeout_s=5.0) as client:
                    client.call("health")
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the daemon was not ready within {READY_S} s") from None
                time.sleep(0.2)
        yield proc
    finally:
        if proc.poll() is None:
            try:
                with AdminClient(data_dir / "admin.sock", timeout_s=5.0) as client:
                    client.call("shutdown")
                proc.wait(60)
            except Exception:  # noqa: BLE001 - kill what did not stop
                proc.kill()
                proc.wait(10)
        log.close()


# --- following replies ---------------------------------------------------------------------------


class Replies:
    """Counts ``result`` events per session from one ``admin follow`` connection."""

    def __init__(self, socket_path: Path) -> None:
        self._client = _connect(socket_path, 10.0)
        self._cond = threading.Condition()
        self._counts: dict[str, int] = {}
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="soak-follow", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for item in self._client.follow():
            dropped = int(item.get("dropped") or 0)
            event = item.get("event") or {}
            with self._cond:
                self.dropped += dropped
                if event.get("type") == "result":
                    sid = item["session_id"]
                    self._counts[sid] = self._counts.get(sid, 0) + 1
                    self._cond.notify_all()

    def wait(self, sid: str, n: int, timeout_s: float = REPLY_S) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._counts.get(sid, 0) >= n, timeout_s)

    def forget(self, sid: str) -> None:
        with self._cond:
            self._counts.pop(sid, None)

    def close(self) -> None:
        self._client.close()


# --- the churn -----------------------------------------------------------------------------------


class Churn:
    def __init__(self, socket_path: Path, replies: Replies, total: int, live: int, on_done: Any) -> None:
        self.live = live
        self.socket_path = socket_path
        self.replies = replies
        self.total = total
        self.on_done = on_done
        self._lock = threading.Lock()
        self._next = 0
        self.done = 0
        self.late_replies = 0
        self.errors: list[str] = []

    def _take(self) -> bool:
        # ``live`` more than ``total`` are taken, so every lane is still busy at the last sample
        with self._lock:
            if self._next >= self.total + self.live or len(self.errors) > 20:
                return False
            self._next += 1
            return True

    def lane(self) -> None:
        with _connect(self.socket_path, REPLY_S) as client:
            while self._take():
                try:
                    self._one(client)
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    with self._lock:
                        self.errors.append(repr(exc))
                    continue
                with self._lock:
                    self.done += 1
                    done = self.done
                self.on_done(done)

    def _wait(self, sid: str, n: int) -> None:
        if not self.replies.wait(sid, n):
            with self._lock:
                self.late_replies += 1

    def _one(self, client: AdminClient) -> None:
        sid = client.call("start", agent=AGENT, prompt="hello")["session"]
        for n, text in enumerate(("second message", "third message"), start=1):
            self._wait(sid, n)
            client.call("send", session=sid, text=text)
        self._wait(sid, MESSAGES_PER_SESSION)
        client.call("stop", session=sid)
        self.replies.forget(sid)


def _connect(path: Path, timeout_s: float) -> AdminClient:
    """A connected client; retried while the listen backlog is full (many lanes connect at once)."""
    deadline = time.monotonic() + READY_S
    while True:
        try:
            return AdminClient(path, timeout_s=timeout_s).connect()
        except Exception:  # noqa: BLE001 - EAGAIN from a full backlog
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _create_agent(path: Path) -> None:
    """The agent every session runs, created with a first session (stopped at once)."""
    with _connect(path, REPLY_S) as client:
        try:
            sid = client.call("start", agent=AGENT, prompt="hello", create=True)["session"]
        except AdminRequestFailed:  # a daemon whose start creates agents unasked (no "create")
            sid = client.call("start", agent=AGENT, prompt="hello")["session"]
        client.call("stop", session=sid)


def soak(provider: str, sessions: int, live: int, warm_up: int, sample_every: int) -> dict[str, Any]:
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="corvid-soak-") as tmp, \
            (StubProcess() if provider == "ollama" else _no_stub()) as url:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir(mode=0o700)
        with daemon(data_dir, provider, url, live) as proc:
            sock = data_dir / "admin.sock"
            sample_lock = threading.Lock()
            started = time.monotonic()

            def sample(done: int) -> None:
                with _connect(sock, 30.0) as admin:
                    stats = admin.call("stats")
                timers = stats.get("timers", {})
                samples.append({
                    "sessions": done, "t_s": round(time.monotonic() - started, 1),
                    "rss_mib": round(proc_status(proc.pid, "VmRSS") / 1024, 2),
                    "threads": proc_status(proc.pid, "Threads"),
                    "fds": len(os.listdir(f"/proc/{proc.pid}/fd")),
                    "db_mib": round(_db_bytes(data_dir) / 2**20, 2),
                    "timers": timers.get("timers"), "clock_handles": timers.get("clock_handles"),
                    "bus_sessions": stats.get("event_bus", {}).get("subscribers"),
                    "admin_recent": stats.get("admin", {}).get("sessions_with_recent_events"),
                })
                s = samples[-1]
                print(f"[soak {provider}] {done:>6,} sessions {s['t_s']:>7.1f} s  RSS {s['rss_mib']:7.2f} MiB  "
                      f"threads {s['threads']:3}  fds {s['fds']:3}  db {s['db_mib']:7.2f} MiB  "
                      f"timers {s['timers']}/{s['clock_handles']}", file=sys.stderr, flush=True)

            def on_done(done: int) -> None:
                if done % sample_every == 0 and done <= sessions:
                    with sample_lock:
                        sample(done)

            _create_agent(sock)
            replies = Replies(sock)
            sample(0)
            churn = Churn(sock, replies, sessions, live, on_done)
            lanes = [threading.Thread(target=churn.lane, name=f"soak-lane-{i}") for i in range(live)]
            for t in lanes:
                t.start()
            cpu0 = proc_cpu_s(proc.pid)
            for t in lanes:
                t.join()
            elapsed = time.monotonic() - started
            daemon_cpu_s = proc_cpu_s(proc.pid) - cpu0
            replies.close()
    steady = [s for s in samples if s["sessions"] >= warm_up]
    rss_slope = slope([(s["sessions"] / 1000, s["rss_mib"]) for s in steady])
    threads = [s["threads"] for s in steady]
    fds = [s["fds"] for s in steady]
    return {
        "provider": provider, "sessions": churn.done, "live": live, "warm_up": warm_up,
        "elapsed_s": round(elapsed, 1), "sessions_per_s": round(churn.done / elapsed, 1),
        "daemon_cpu_s": round(daemon_cpu_s, 1), "daemon_cpu_ms_per_session": round(daemon_cpu_s / churn.done * 1e3, 2),
        "rss_mib_per_1000": round(rss_slope, 3),
        "rss_mib_start": steady[0]["rss_mib"] if steady else None,
        "rss_mib_end": steady[-1]["rss_mib"] if steady else None,
        "threads_min_max": [min(threads), max(threads)] if threads else None,
        "fds_min_max": [min(fds), max(fds)] if fds else None,
        "threads_per_1000": round(slope([(s["sessions"] / 1000, s["threads"]) for s in steady]), 3),
        "fds_per_1000": round(slope([(s["sessions"] / 1000, s["fds"]) for s in steady]), 3),
        "db_mib_per_1000": round(slope([(s["sessions"] / 1000, s["db_mib"]) for s in steady]), 3),
        "late_replies": churn.late_replies, "follow_dropped": replies.dropped,
        "errors": churn.errors[:5], "error_count": len(churn.errors),
        "met": bool(steady) and len(steady) >= 2 and rss_slope <= GOAL_MIB_PER_1000 and not churn.errors,
        "samples": samples,
    }


def _paired(runs: list[dict[str, Any]], together: bool) -> list[dict[str, Any]]:
    """The two model servers' daemon CPU per churned session, as one pair (both ran at
    once) — a soak is one long trial per side, so there is one pair, not a spread."""
    by = {r["provider"]: r for r in runs}
    if not together or set(by) != {"ollama", "stub"}:
        return []
    trials = {p: [Trial(p, 0, by[p]["elapsed_s"], by[p]["daemon_cpu_s"], by[p]["sessions"], {})] for p in by}
    return [compare(trials, "ollama", "stub", kind="cost", digits=2,
                    label="soak: daemon with its built-in stub / with the stub Ollama process (time per session)")]


@contextmanager
def _no_stub() -> Iterator[None]:
    yield None


def run(args: argparse.Namespace) -> dict[str, Any]:
    sessions = args.sessions or (3_000 if args.quick else DEFAULT_SESSIONS)
    warm_up = args.warm_up if args.warm_up is not None else (1_000 if args.quick else DEFAULT_WARM_UP)
    providers = ["ollama", "stub"] if args.provider == "both" else [args.provider]
    load_before = loadavg()
    t0 = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    if args.sequential or len(providers) == 1:
        runs = [soak(p, sessions, args.live, warm_up, args.sample_every) for p in providers]
    else:  # both model servers at the same moment: the same load from the rest of the machine
        found: dict[str, dict[str, Any]] = {}

        def one(p: str) -> None:
            found[p] = soak(p, sessions, args.live, warm_up, args.sample_every)
        threads = [threading.Thread(target=one, args=(p,), name=f"soak-{p}") for p in providers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        missing = [p for p in providers if p not in found]
        if missing:
            raise RuntimeError(f"the soak of {missing} failed (see above)")
        runs = [found[p] for p in providers]
    for r in runs:
        print(f"[soak {r['provider']}] {r['sessions']:,} sessions in {r['elapsed_s']} s: RSS slope "
              f"{r['rss_mib_per_1000']} MiB per 1,000 sessions after the first {r['warm_up']:,} "
              f"(goal ≤ {GOAL_MIB_PER_1000}); threads {r['threads_min_max']}, fds {r['fds_min_max']}, "
              f"database +{r['db_mib_per_1000']} MiB per 1,000", file=sys.stderr, flush=True)
    return {
        "name": "soak", "goal": f"RSS slope ≤ {GOAL_MIB_PER_1000} MiB per 1,000 sessions after the first "
                                f"{warm_up:,} (both model servers); threads and fds flat",
        # a short run (warm-up below the default) is a smoke run: its slope is not judged
        "met": all(r["met"] for r in runs) if warm_up >= DEFAULT_WARM_UP else None,
        "runs": runs, "model": BENCH_MODEL,
        "together": not args.sequential and len(runs) > 1, "paired": _paired(runs, not args.sequential),
        "command": "python -m bench.soak" + (f" --sessions {sessions}" if sessions != DEFAULT_SESSIONS else "")
                   + (f" --provider {args.provider}" if args.provider != "both" else ""),
        "run_at": f"{t0}–{time.strftime('%H:%M', time.gmtime())} UTC",
        "load_before": load_before, "load_after": loadavg(),
    }


def record(result: dict[str, Any]) -> None:
    """Merge into bench/results.json and re-render bench/RESULTS.md (the other figures are kept)."""
    from bench.report import write_results

    raw = ROOT / "bench" / "results.json"
    results = json.loads(raw.read_text()) if raw.exists() else {}
    previous = results.get("soak")
    if previous and not previous.get("failed"):  # a run of one model server keeps the other's
        ran = {r["provider"] for r in result["runs"]}
        kept = [r for r in previous.get("runs", []) if r["provider"] not in ran]
        if kept:
            runs = kept + result["runs"]
            result = {**result, "runs": runs, "met": all(r["met"] for r in runs),
                      "command": "python -m bench.soak", "run_at": f"{previous['run_at']}; {result['run_at']}"}
    results["soak"] = result
    raw.write_text(json.dumps(results, indent=1))
    write_results(ROOT / "bench" / "RESULTS.md", results, machine(), quick=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak")
    parser.add_argument("--quick", action="store_true", help="3,000 sessions, 1,000 of warm-up (a smoke run)")
    parser.add_argument("--sessions", type=int, default=0, help=f"sessions to churn (default {DEFAULT_SESSIONS:,})")
    parser.add_argument("--live", type=int, default=DEFAULT_LIVE, help="sessions live at once")
    parser.add_argument("--warm-up", type=int, default=None, help="sessions before the slope is measured")
    parser.add_argument("--sample-every", type=int, default=DEFAULT_SAMPLE_EVERY)
    parser.add_argument("--provider", choices=("ollama", "stub", "both"), default="both",
                        help="model server: another process (ollama), the daemon's built-in stub, or both runs")
    parser.add_argument("--record", action="store_true", help="write the result into bench/RESULTS.md")
    parser.add_argument("--sequential", action="store_true",
                        help="run the two model servers' soaks one after the other (default: at once)")
    args = parser.parse_args(argv)
    result = run(args)
    print(RESULT_MARKER + json.dumps(result), flush=True)
    if args.record:
        record(result)
    return 0 if result["met"] is not False else 1


if __name__ == "__main__":
    sys.exit(main())
