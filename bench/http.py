"""Issue 39's limits of the HTTP listener, measured over a real uvicorn socket.

1. **The sessions page** (``GET /api/v1/sessions``) over 100,000 stored sessions: each request
   through the whole path (token check, validator, AdminActor, keyset read, JSON) under
   50 ms. Paired: a deep page (a cursor 90 % down the table) and a filtered one
   (``status=``, ``source=``) against the first page — keyset paging on an index costs the
   same wherever the page is; an offset or a full scan would not.
2. **SSE delivery**: 1,000 sessions' events published on the EventBus (one per session a
   second, spread evenly: 1,000 events/s, for 5 s), streamed to 10 clients of ``GET /api/v1/events`` in another process;
   p99 from publish to client (``time.monotonic``, system-wide) ≤ 100 ms. Paired: each
   round's 10-client p99 over its 1-client p99 (what the fan-out costs).

    .venv/bin/python -m bench.http            (--quick: 10,000 sessions, fewer events)

Each figure is printed with the load average before and after: on a shared machine the
latencies follow the neighbours' load. A flat ~40-50 ms floor on every page, whatever the
page, with ~6 ms of CPU a request, is Nagle's algorithm waiting on the client's delayed ACK
(uvicorn writes headers and body in two sends): the listener's accepted sockets must have
``TCP_NODELAY`` (tests/http/test_listener.py checks it). Measured with ``--quick`` before
and after that fix: first page p50 47.85 -> 7.18 ms (load 3.5-4.5, then 7.8).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench._common import cli, loadavg, percentile, quiet_logs
from bench._paired import Outcome, compare, interleave

SESSIONS = 100_000
PAGE_LIMIT = 50
PAGE_GOAL_MS = 50.0
SSE_SESSIONS = 1_000
SSE_CLIENTS = 10
SSE_EVENTS_PER_SESSION = 5
SSE_GOAL_MS = 100.0


class Daemon:
    """A real-clock runtime, its AdminActor and the HTTP listener (as ``serve`` wires them)."""

    def __init__(self, workdir: Path, **http: Any) -> None:
        import pykka

        from corvid_actors.actors.admin import AdminActor, AdminCommand, AdminWiring, Follow, Ready
        from corvid_actors.config import Config, DaemonConfig
        from corvid_actors.daemon.http_listener import start_http_listener
        from corvid_actors.db.api_tokens import ApiTokenStore
        from corvid_actors.runtime import Runtime

        config = Config().replace(http={"listen": "127.0.0.1:0", **http})
        self.runtime = rt = Runtime(config, store_url=f"sqlite:///{workdir / 'corvid.db'}",
                                    workspace_dir=workdir / "ws")
        tree = rt.internals
        self.admin = admin = AdminActor.start(tree.tracker, AdminWiring(
            supervisor=tree.supervisor, approvals=tree.approvals, bus=tree.bus, timers=tree.timers,
            slot_pool=tree.slot_pool, credits=tree.credits, store=tree.store, providers=tree.providers,
            clock=rt.clock, settings=DaemonConfig(), about={}))
        admin.ask(Ready())

        def handle(request: Any) -> Any:
            result = admin.ask(AdminCommand(request.cmd, request.args))
            return result.get() if isinstance(result, pykka.Future) else result

        def follow(session_id: str | None, sink: Any) -> Any:
            return admin.ask(Follow(session_id, sink), block=True)

        self.token = ApiTokenStore(tree.store).create("bench", "read", now=rt.clock.now())
        self.listener = start_http_listener(rt, tree.store, tree.cluster, handle, follow)

    def close(self) -> None:
        self.listener.stop()
        self.admin.stop()
        self.runtime.shutdown()


def fill_sessions(db: Path, n: int) -> None:
    """``n`` session rows (one agent, statuses and sources mixed, distinct update times),
    bulk-inserted on a migrated store (the columns' defaults filled by the models)."""
    from datetime import datetime, timedelta

    from corvid_actors.db.store import Store

    store = Store(f"sqlite:///{db}")
    try:
        agent = store.create_agent("bench-agent")
        S = store.m.Session
        base = datetime(2026, 1, 1)
        statuses = ("idle", "stopped", "error", "idle", "stopped")
        rows = [{"id": f"s-{i:07d}", "agent": agent.id, "name": f"session {i}", "status": statuses[i % 5],
                 "source": "chat" if i % 3 else "web", "participant": f"user{i % 977}",
                 "created_at": base + timedelta(seconds=i), "updated_at": base + timedelta(seconds=i)}
                for i in range(n)]
        with store.db.atomic():
            for k in range(0, n, 2000):
                S.insert_many(rows[k:k + 2000]).execute()
    finally:
        store.close()


def _sessions_page(args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    n = 10_000 if args.quick else args.sessions
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        fill_sessions(workdir / "corvid.db", n)
        daemon = Daemon(workdir)
        try:
            client = httpx.Client(base_url=daemon.listener.url, headers={"Authorization": f"Bearer {daemon.token}"},
                                  timeout=30)
            # the cursor 90 % down: walk there once, untimed, 1,000 rows a page
            cursor, walked = None, 0
            while walked < int(n * 0.9):
                page = client.get("/api/v1/sessions", params={"limit": 1000, **({"cursor": cursor} if cursor else {})})
                body = page.json()
                walked += len(body["sessions"])
                cursor = body["next_cursor"]
            requests = 20 if args.quick else 100
            latencies: dict[str, list[float]] = {}

            def side(name: str, params: dict[str, Any]) -> Any:
                def trial() -> Outcome:
                    times = []
                    for _ in range(requests):
                        started = time.perf_counter()
                        r = client.get("/api/v1/sessions", params={"limit": PAGE_LIMIT, **params})
                        times.append((time.perf_counter() - started) * 1000)
                        assert r.status_code == 200 and len(r.json()["sessions"]) == PAGE_LIMIT, r.text[:200]
                    latencies.setdefault(name, []).extend(times)
                    return Outcome(requests)
                return trial

            load_before = loadavg()
            trials = interleave({"first": side("first", {}), "deep": side("deep", {"cursor": cursor}),
                                 "status": side("status", {"status": "stopped"}),
                                 "source": side("source", {"source": "web"})}, trials=5, warmup=1)
            figures = {name: {"p50_ms": round(percentile(v, 50), 2), "p99_ms": round(percentile(v, 99), 2)}
                       for name, v in latencies.items()}
            return {
                "sessions": n, "page": PAGE_LIMIT, "load_before": load_before, "load_after": loadavg(),
                "latency": figures, "goal_ms": PAGE_GOAL_MS,
                "met": all(f["p50_ms"] < PAGE_GOAL_MS for f in figures.values()),
                "paired": [compare(trials, "first", b, kind="cost", label=f"sessions page: {b} / first page")
                           for b in ("deep", "status", "source")],
            }
        finally:
            daemon.close()


_CLIENTS = r"""
import asyncio, json, sys, time
import httpx
url, token, n_clients, expected = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lat = []
async def one(ready):
    async with httpx.AsyncClient(timeout=None) as c:
        async with c.stream("GET", url + "/api/v1/events?backlog=0", headers={"Authorization": "Bearer " + token}) as r:
            got = 0
            ready.set_result(True) if not ready.done() else None
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    at = float(json.loads(line[6:])["event"]["content"])
                    lat.append((time.monotonic() - at) * 1000)
                    got += 1
                    if got == expected:
                        return
async def main():
    loop = asyncio.get_running_loop()
    readies = [loop.create_future() for _ in range(n_clients)]
    tasks = [asyncio.ensure_future(one(r)) for r in readies]
    await asyncio.gather(*readies)
    print("READY", flush=True)
    await asyncio.wait_for(asyncio.gather(*tasks), 300)
    print("LAT " + json.dumps(lat), flush=True)
asyncio.run(main())
"""


def _sse_trial(daemon: Daemon, clients: int, sessions: int, per_session: int) -> Outcome:
    from corvid_actors.actors.base import tell
    from corvid_actors.actors.events import Publish
    from corvid_actors.events import Assistant

    expected = sessions * per_session
    proc = subprocess.Popen([sys.executable, "-c", _CLIENTS, daemon.listener.url, daemon.token, str(clients),
                             str(expected)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    # the streams are open; give the listener a moment to register the last one
    time.sleep(0.2)
    bus = daemon.runtime.internals.bus
    started = time.perf_counter()
    for round_ in range(per_session):
        for i in range(sessions):  # one event per session per round, a round a second, spread over it
            tell(bus, Publish(f"s-{i}", Assistant(content=repr(time.monotonic()))))
            time.sleep(max(0.0, started + round_ + (i + 1) / sessions - time.perf_counter()))
    out, _ = proc.communicate(timeout=300)
    lat = json.loads(out.split("LAT ", 1)[1])
    return Outcome(len(lat), {"p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
                              "delivered": len(lat), "expected": expected * clients})


def _sse(args: argparse.Namespace) -> dict[str, Any]:
    sessions = 200 if args.quick else SSE_SESSIONS
    per_session = 2 if args.quick else SSE_EVENTS_PER_SESSION
    with tempfile.TemporaryDirectory() as tmp:
        daemon = Daemon(Path(tmp), sse_client_queue_events=sessions * per_session + 10)
        try:
            load_before = loadavg()
            trials = interleave({"one": lambda: _sse_trial(daemon, 1, sessions, per_session),
                                 "ten": lambda: _sse_trial(daemon, SSE_CLIENTS, sessions, per_session)},
                                trials=1 if args.quick else 3, warmup=1)
            ten = trials["ten"]
            p99 = max(t.extra["p99_ms"] for t in ten)
            return {
                "sessions": sessions, "events_per_session": per_session, "clients": SSE_CLIENTS,
                "load_before": load_before, "load_after": loadavg(),
                "ten_clients": [{k: round(v, 2) if isinstance(v, float) else v for k, v in t.extra.items()}
                                for t in ten],
                "one_client": [{k: round(v, 2) if isinstance(v, float) else v for k, v in t.extra.items()}
                               for t in trials["one"]],
                "goal_ms": SSE_GOAL_MS, "met": p99 <= SSE_GOAL_MS,
                # paired: round k's 10-client p99 over its 1-client p99 (run next to each other)
                "paired_p99_ten_over_one": [round(t.extra["p99_ms"] / o.extra["p99_ms"], 2)
                                            for o, t in zip(trials["one"], ten, strict=True)],
            }
        finally:
            daemon.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    out: dict[str, Any] = {}
    if args.only in (None, "page"):
        out["sessions_page"] = _sessions_page(args)
    if args.only in (None, "sse"):
        out["sse"] = _sse(args)
    return out


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=SESSIONS, help=f"stored sessions (default {SESSIONS})")
    parser.add_argument("--only", choices=("page", "sse"), help="run one of the two")


if __name__ == "__main__":
    threading.current_thread().name = "bench-http"
    cli(run, _flags)
