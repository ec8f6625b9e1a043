"""Issue 20 — the cross-daemon bus on PostgreSQL: event fan-out and command round trips.

Two :class:`~corvid_actors.db.pg_bus.PgBus` instances ("daemons" A and B) in this process,
on one PostgreSQL database (a schema made for the run and dropped after it):
- event fan-out A → B, ``--events`` events (10,000), each stamped with the monotonic time
  of the publish call that sent it; B's events handler records receive − send per event:
  - ``unbatched``: one ``publish_events`` call (one transaction, one NOTIFY) per event;
  - ``batched``: ``--batch`` events (100) per call, split by the bus into payloads under
    8000 bytes;
  both as fast as A can publish (the p99 then includes B's queue), and ``paced``: one
  event every 1/``--rate`` s (no queue: the latency of one notification);
- command round trip: ``--commands`` (1,000) sequential ``forward`` + ``await_result``
  A → B, B's handler answering at once.
Events carry a session id, a type and ``--text`` characters (a content delta's size).

    python -m bench.pg_bus [--quick] [--events N] [--batch N] [--commands N]

PostgreSQL at ``CORVID_TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench._common import cli, loadavg, machine, percentile, quiet_logs

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
#: the longest a run waits for B to receive what A sent
DRAIN_TIMEOUT_S = 120.0


@contextmanager
def bench_schema() -> Iterator[str]:
    """A store URL on a fresh schema of the test database, migrated; dropped afterwards."""
    import psycopg2

    from corvid_actors.db.store import Store

    base = os.environ.get("CORVID_TEST_PG_URL") or DEFAULT_PG_URL
    schema = f"bench_pgbus_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(base)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in base else "?"
    url = f"{base}{sep}options=-csearch_path%3D{schema}"
    try:
        Store(url).close()
        yield url
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()


class Receiver:
    """B's side: latency of every event received, and a wake-up when enough arrived."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.latencies: list[float] = []

    def on_events(self, origin: str, events: list[Any]) -> None:
        now = time.monotonic()
        with self.cond:
            self.latencies += [now - e["t"] for e in events]
            self.cond.notify_all()

    def expect(self, n: int) -> list[float]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.latencies) >= n, DRAIN_TIMEOUT_S), \
                f"B received {len(self.latencies)} of {n} events"
            taken, self.latencies = self.latencies, []
        return taken


def summarise(latencies_s: list[float], wall_s: float, notifications: int) -> dict[str, Any]:
    ms = [x * 1000 for x in latencies_s]
    return {"events": len(ms), "notifications": notifications, "wall_s": round(wall_s, 3),
            "events_per_s": round(len(ms) / wall_s) if wall_s else None,
            "p50_ms": round(percentile(ms, 50), 3), "p99_ms": round(percentile(ms, 99), 3),
            "max_ms": round(max(ms), 3)}


def fan_out(a: Any, receiver: Receiver, n: int, batch: int, text: str,
            interval_s: float = 0.0) -> dict[str, Any]:
    notifications = 0
    started = time.monotonic()
    for first in range(0, n, batch):
        stamp = time.monotonic()
        events = [{"session_id": f"s{i % 10}", "type": "content_block_delta", "n": i, "t": stamp, "text": text}
                  for i in range(first, min(n, first + batch))]
        notifications += a.publish_events(events)
        if interval_s:
            time.sleep(max(0.0, stamp + interval_s - time.monotonic()))
    latencies = receiver.expect(n)
    return summarise(latencies, time.monotonic() - started, notifications)


def round_trips(a: Any, n: int) -> dict[str, Any]:
    ms = []
    for i in range(n):
        t0 = time.monotonic()
        a.await_result(a.forward("b", {"op": "echo", "i": i}), 10.0)
        ms.append((time.monotonic() - t0) * 1000)
    return {"commands": n, "p50_ms": round(percentile(ms, 50), 3), "p99_ms": round(percentile(ms, 99), 3),
            "max_ms": round(max(ms), 3)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from corvid_actors.clock import RealClock
    from corvid_actors.db.pg_bus import PgBus, Reply

    quiet_logs()
    events = 1000 if args.quick else args.events
    commands = 200 if args.quick else args.commands
    paced = min(events, 1000)
    text = "x" * args.text
    receiver = Receiver()
    namespace = f"b{uuid.uuid4().hex[:10]}"

    def echo(origin: str, command: Any, reply: Reply) -> None:
        reply.done(command)

    result: dict[str, Any] = {"benchmark": "pg_bus", "machine": machine(), "load_before": loadavg(),
                              "sizes": {"events": events, "batch": args.batch, "text_chars": args.text,
                                        "paced_events": paced, "paced_rate_per_s": args.rate,
                                        "commands": commands}}
    with bench_schema() as url:
        a = PgBus(url, "a", clock=RealClock(), on_command=echo, on_events=lambda o, e: None, namespace=namespace)
        b = PgBus(url, "b", clock=RealClock(), on_command=echo, on_events=receiver.on_events, namespace=namespace)
        a.start()
        b.start()
        try:
            fan_out(a, receiver, min(events, 500), 1, text)  # warm-up: connections, plans
            round_trips(a, 20)
            result["fan_out"] = {
                "unbatched": fan_out(a, receiver, events, 1, text),
                "batched": fan_out(a, receiver, events, args.batch, text),
                "paced": fan_out(a, receiver, paced, 1, text, interval_s=1 / args.rate),
            }
            result["command_round_trip"] = round_trips(a, commands)
            result["missed_notifications"] = b.missed_notifications
        finally:
            a.stop()
            b.stop()
    for name, row in result["fan_out"].items():
        print(f"fan-out {name:9}: {row['events']} events in {row['notifications']} NOTIFYs, "
              f"{row['events_per_s']}/s, p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms")
    rt = result["command_round_trip"]
    print(f"command round trip: {rt['commands']} commands, p50 {rt['p50_ms']} ms, p99 {rt['p99_ms']} ms")
    return result


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--text", type=int, default=40, help="characters of text per event")
    parser.add_argument("--rate", type=float, default=500.0, help="events per second of the paced run")
    parser.add_argument("--commands", type=int, default=1000)


if __name__ == "__main__":
    cli(run, configure)
