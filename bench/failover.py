"""Benchmark — issue 20 failover: how long the sessions of a dead daemon are down.

Two runtimes ("daemons") in this process on one fresh PostgreSQL schema, real clock:
daemon A runs N sessions (each has answered one scripted turn and waits for its user);
then A is cut off from the database (its connections go through a ``TcpProxy`` that
resets them and refuses new ones — for the others, A is dead). Daemon B's sweep claims the
expired leases and resumes each session (ready: no turn, none was mid-turn). The downtime
of a session is from the cut to its ``session_started`` on B: reported as p50/p99/max,
with the floor the lease sets (a lease expires ``lease_s`` after A's last heartbeat) and the
time B's supervisor spends resuming them one by one.

Timings are scaled down so a run is short (heartbeat 0.2 s, lease 1 s, sweep every 0.2 s);
with the defaults (5 s, 15 s, 5 s) add 14 s (the longer lease) and up to 5 s (the sweep).

    python -m bench.failover [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import cli, loadavg, machine, median, percentile, quiet_logs
from bench.cluster import _admin, _schema_url, pg_url

SESSIONS = 1_000
CLUSTER = {"enabled": True, "heartbeat_s": 0.2, "lease_s": 1.0, "sweep_interval_s": 0.2,
           "sweep_jitter_s": 0.05, "dead_daemon_grace_s": 2.0, "max_sessions": 100_000}
WAIT_S = 300.0


def _runtime(name: str, url: str, workdir: Path) -> tuple[Any, Any, Any]:
    from corvid_actors import Runtime
    from corvid_actors.clock import RealClock
    from corvid_actors.config import Config
    from corvid_actors.db.store import Store
    from corvid_actors.testing import ScriptedProvider

    model = ScriptedProvider(RealClock(), default_reply="ok")
    cfg = Config().replace(cluster={**CLUSTER, "daemon_id": name}, providers={"default_provider": "scripted"},
                           supervisor={"session_timeout_s": 3600.0})
    store = Store(url)
    runtime = Runtime(cfg, store=store, providers={"scripted": model}, workspace_dir=workdir / name)
    return runtime, store, model


def failover(url: str, sessions: int) -> dict[str, Any]:
    from corvid_actors.testing.tcp_proxy import TcpProxy

    proxy = TcpProxy("127.0.0.1", 5432).start()
    workdir = Path(tempfile.mkdtemp(prefix="corvid-failover-"))
    a, a_store, _ = _runtime("a", proxy.url(url), workdir)
    b = b_store = None
    try:
        sids = [a.create_session(source="web", name=f"s{i}").id for i in range(sessions)]
        for sid in sids:
            a.start_process(sid, "hello")
        a.settle(WAIT_S)
        b, b_store, b_model = _runtime("b", url, workdir)
        started: dict[str, float] = {}
        lock = threading.Lock()
        done = threading.Event()
        wanted = set(sids)

        def on_event(sid: str, event: Any) -> None:
            if event.type == "session_started" and sid in wanted:
                with lock:
                    started.setdefault(sid, time.monotonic())
                    if len(started) == len(wanted):
                        done.set()

        b.subscribe_all(on_event)
        cut = time.monotonic()
        proxy.cut()
        proxy.refuse()
        if not done.wait(WAIT_S):
            raise RuntimeError(f"only {len(started)} of {sessions} sessions came back within {WAIT_S} s")
        downtime = sorted(t - cut for t in started.values())
        return {
            "sessions": sessions, "lease_s": CLUSTER["lease_s"], "heartbeat_s": CLUSTER["heartbeat_s"],
            "sweep_interval_s": CLUSTER["sweep_interval_s"],
            "downtime_s": {"p50": round(median(downtime), 3), "p99": round(percentile(downtime, 99), 3),
                           "max": round(downtime[-1], 3), "first": round(downtime[0], 3)},
            "resume_spread_s": round(downtime[-1] - downtime[0], 3),
            "turns_given_on_b": len(b_model.requests),
        }
    finally:
        proxy.close()
        for runtime, store in ((b, b_store), (a, a_store)):
            if runtime is not None:
                try:
                    runtime.shutdown(settle_timeout_s=30.0)
                except Exception:  # noqa: BLE001 - a cut-off daemon's shutdown may fail its writes
                    pass
                store.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    sessions = 200 if args.quick else SESSIONS
    base = pg_url()
    load_before = loadavg()
    schema = f"bench_failover_{uuid.uuid4().hex[:10]}"
    _admin(base, f'CREATE SCHEMA "{schema}"')
    try:
        result = failover(_schema_url(base, schema), sessions)
    finally:
        _admin(base, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return {
        "name": "failover", "machine": machine(), "load_before": load_before, **result,
        "goal": "every session of the dead daemon running again on another within lease + one sweep "
                "(+ the time to resume them); none given a turn it did not need",
        "met": result["turns_given_on_b"] == 0,
        "command": ".venv/bin/python -m bench.failover",
    }


if __name__ == "__main__":
    cli(run)
