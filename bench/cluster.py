"""Benchmark — issue 20 leases on PostgreSQL: lease renewal per heartbeat, claim throughput.

On a fresh schema of a real PostgreSQL (``CORVID_BENCH_PG_URL``, else ``CORVID_TEST_PG_URL``,
else ``postgresql://postgres@127.0.0.1:5432/test``; server defaults, so commits wait for
their WAL flush as a daemon's do):

- ``heartbeat``: one daemon owning 10,000 leases renews them: the ONE statement
  (``ClusterStore.heartbeat``'s CTE, timed around execute + fetch) and the whole call
  (its transaction's commit included), 50 runs each, median and p99; then the same with
  the 10,000 leases split over 4 daemons (one daemon's heartbeat renews 2,500). The share of
  heartbeat updates PostgreSQL made in place (HOT, no index writes) is reported too.
- ``claim``: session starts, one ``claim([id])`` per session (1,000 sessions); claims in
  batches of 100 ids (10,000 sessions); and a failover: 10,000 expired leases swept by 4
  daemons at once, each on its own connection and thread, ``claim_expired`` until none is
  left (claims/s over all of them, and a check that no session was claimed twice).
- ``sweep``: a failover sweep that finds nothing to take (the common case: every daemon
  every ``sweep_interval_s``), median of 50, with no ended sessions' leases in the table and
  with ``ENDED`` of them (a lease row stays when its session ends): the sweep must read the
  held leases only.
- ``fencing``: what the fencing trigger adds to the message writer's statement: one
  multi-row INSERT of 500 messages over 100 leased sessions, rows carrying their epoch
  (checked by the trigger, one lease lock per session) against rows carrying none.

    python -m bench.cluster [--quick]
"""

from __future__ import annotations

import argparse
import os
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from bench._common import cli, loadavg, machine, median, now, percentile, quiet_logs

SESSIONS = 10_000
RUNS = 50
SPLIT_DAEMONS = 4
SINGLE_CLAIMS = 1_000
CLAIM_BATCH = 100
SWEEPERS = 4
LEASE_S = 15.0
MAX_SESSIONS = 100_000
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
#: the fencing measurement: rows of one INSERT (the writer's batch) over this many sessions
FENCED_BATCH = 500
FENCED_SESSIONS = 100
#: lease rows of ended sessions in the sweep measurement (quick: a tenth)
ENDED = 100_000
#: sweeps timed per table size
SWEEP_RUNS = 50
#: the goal of issue 20 for one heartbeat at 10,000 leases (ms, median of the statement)
GOAL_HEARTBEAT_MS = 50.0


def pg_url() -> str:
    return (os.environ.get("CORVID_BENCH_PG_URL") or os.environ.get("CORVID_TEST_PG_URL")
            or "postgresql://postgres@127.0.0.1:5432/test")


def _schema_url(base: str, schema: str) -> str:
    sep = "&" if urlsplit(base).query else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


def _admin(base: str, sql: str) -> None:
    import psycopg2

    conn = psycopg2.connect(base)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(sql)
    conn.close()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def make_sessions(store: Any, count: int) -> list[str]:
    ids = [str(uuid.uuid4()) for _ in range(count)]
    S = store.m.Session
    with store.transaction():
        for start in range(0, count, 1000):
            S.insert_many([{"id": sid, "name": "bench"} for sid in ids[start:start + 1000]]).execute()
    return ids


def time_heartbeat(cluster: Any, daemon_id: str, runs: int, clock: float) -> dict[str, Any]:
    """``runs`` heartbeats: the statement alone, then the whole call; times in ms."""
    store = cluster.store
    sql = cluster._sql.heartbeat
    statement, call, renewed = [], [], 0
    for i in range(runs):
        moment = at(clock + i)
        args = (moment.replace(tzinfo=None), daemon_id, (moment + timedelta(seconds=LEASE_S)).replace(tzinfo=None))
        with store.transaction():
            t0 = now()
            beats, renewed = store.db.execute_sql(sql, args).fetchone()
            statement.append((now() - t0) * 1000)
    for i in range(runs):
        t0 = now()
        renewed = cluster.heartbeat(daemon_id, at(clock + runs + i), LEASE_S)
        call.append((now() - t0) * 1000)
    return {"leases_renewed": renewed,
            "statement_ms": {"median": round(median(statement), 2), "p99": round(percentile(statement, 99), 2)},
            "call_with_commit_ms": {"median": round(median(call), 2), "p99": round(percentile(call, 99), 2)}}


def hot_share(store: Any) -> float | None:
    """The share of session_leases updates made in place (HOT), from the statistics."""
    try:  # PostgreSQL 15+: publish this backend's counters now (else up to a second later)
        store.db.execute_sql("SELECT pg_stat_force_next_flush()")
        store.db.execute_sql("SELECT 1")
        store.db.execute_sql("SELECT pg_stat_clear_snapshot()")
    except Exception:  # noqa: BLE001 - older servers: the figure may lag
        store.db.rollback()
    upd, hot = store.db.execute_sql(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'session_leases' "
        "AND schemaname = current_schema()").fetchone()
    return round(hot / upd, 3) if upd else None


def heartbeat_bench(url: str, sessions: int, runs: int) -> dict[str, Any]:
    from corvid_actors.db.cluster import ClusterStore
    from corvid_actors.db.store import Store

    store = Store(url)
    cluster = ClusterStore(store)
    try:
        ids = make_sessions(store, sessions)
        cluster.register_daemon("solo", "bench", os.getpid(), "bench", T0)
        for start in range(0, sessions, 1000):
            cluster.claim(ids[start:start + 1000], "solo", T0, LEASE_S)
        store.db.execute_sql("ANALYZE session_leases")
        one = time_heartbeat(cluster, "solo", runs, 1.0)

        # the same leases over SPLIT_DAEMONS daemons: what one daemon's heartbeat costs then
        per = sessions // SPLIT_DAEMONS
        names = [f"d{k}" for k in range(SPLIT_DAEMONS)]
        clock = 1.0 + 2 * runs + LEASE_S + 1  # every lease of "solo" expired
        for k, name in enumerate(names):
            cluster.register_daemon(name, "bench", os.getpid(), "bench", at(clock))
            cluster.claim(ids[k * per:(k + 1) * per], name, at(clock), LEASE_S)
        store.db.execute_sql("ANALYZE session_leases")
        split = time_heartbeat(cluster, names[0], runs, clock)
        return {"one_daemon": one, f"{SPLIT_DAEMONS}_daemons": split, "hot_update_share": hot_share(store)}
    finally:
        store.close()


def claim_bench(url: str, sessions: int, single: int) -> dict[str, Any]:
    from corvid_actors.db.cluster import ClusterStore
    from corvid_actors.db.store import Store

    store = Store(url)
    cluster = ClusterStore(store)
    try:
        cluster.register_daemon("starter", "bench", os.getpid(), "bench", T0)
        # session starts: one claim per session
        ids = make_sessions(store, single)
        t0 = now()
        for sid in ids:
            cluster.claim([sid], "starter", T0, LEASE_S)
        single_s = now() - t0

        # batches of CLAIM_BATCH ids
        ids = make_sessions(store, sessions)
        t0 = now()
        for start in range(0, sessions, CLAIM_BATCH):
            cluster.claim(ids[start:start + CLAIM_BATCH], "starter", T0, LEASE_S)
        batch_s = now() - t0

        # failover: every lease of "starter" expired; SWEEPERS daemons sweep at once
        sweepers = [ClusterStore(Store(url)) for _ in range(SWEEPERS)]
        names = [f"sweeper{k}" for k in range(SWEEPERS)]
        moment = at(LEASE_S + 1)
        for sweeper, name in zip(sweepers, names, strict=True):
            sweeper.register_daemon(name, "bench", os.getpid(), "bench", moment)
        got: list[list[str]] = [[] for _ in sweepers]
        sweeps: list[list[float]] = [[] for _ in sweepers]
        barrier = threading.Barrier(SWEEPERS + 1)

        def sweep(k: int) -> None:
            barrier.wait()
            while True:
                t = now()
                claims = sweepers[k].claim_expired(names[k], moment, LEASE_S, SWEEPERS, MAX_SESSIONS)
                sweeps[k].append((now() - t) * 1000)
                if not claims:
                    return
                got[k] += [c.session_id for c in claims]

        threads = [threading.Thread(target=sweep, args=(k,)) for k in range(SWEEPERS)]
        for thread in threads:
            thread.start()
        barrier.wait()
        t0 = now()
        for thread in threads:
            thread.join()
        sweep_s = now() - t0
        for sweeper in sweepers:
            sweeper.store.close()
        taken = [sid for mine in got for sid in mine]
        all_sweeps = [ms for mine in sweeps for ms in mine]
        return {
            "single_claims_per_s": round(single / single_s),
            "single_claim_ms": round(single_s / single * 1000, 2),
            f"batch_{CLAIM_BATCH}_claims_per_s": round(sessions / batch_s),
            "failover": {
                "expired_leases": sessions + single, "sweepers": SWEEPERS,
                "claims_per_s": round(len(taken) / sweep_s), "seconds": round(sweep_s, 3),
                "claimed": len(taken), "claimed_twice": len(taken) - len(set(taken)),
                "per_sweeper": [len(mine) for mine in got], "sweeps": len(all_sweeps),
                "sweep_ms": {"median": round(median(all_sweeps), 2), "p99": round(percentile(all_sweeps, 99), 2)},
            },
        }
    finally:
        store.close()


def sweep_bench(url: str, ended: int) -> dict[str, Any]:
    """A sweep that finds nothing: with no ended leases, then with ``ended`` of them."""
    from corvid_actors.db.cluster import ClusterStore
    from corvid_actors.db.store import Store

    store = Store(url)
    cluster = ClusterStore(store)
    try:
        cluster.register_daemon("held", "bench", os.getpid(), "bench", T0)
        cluster.register_daemon("sweeper", "bench", os.getpid(), "bench", T0)
        cluster.claim(make_sessions(store, 1000), "held", T0, LEASE_S)  # a live daemon's leases
        out: dict[str, Any] = {}
        for label, rows in (("none", 0), ("ended", ended)):
            if rows:
                ids = make_sessions(store, rows)
                L = store.m.SessionLease
                with store.transaction():
                    for start in range(0, rows, 1000):
                        L.insert_many([{"session": sid, "epoch": 3} for sid in ids[start:start + 1000]]).execute()
            store.db.execute_sql("ANALYZE session_leases")
            times = []
            for _ in range(SWEEP_RUNS):
                t0 = now()
                assert cluster.claim_expired("sweeper", at(1), LEASE_S, 2, MAX_SESSIONS) == []
                times.append((now() - t0) * 1000)
            out[label] = {"ended_leases": rows, "sweep_ms": {"median": round(median(times), 3),
                                                            "p99": round(percentile(times, 99), 3)}}
        return out
    finally:
        store.close()


def fencing_bench(url: str, runs: int) -> dict[str, Any]:
    from corvid_actors.db.cluster import ClusterStore
    from corvid_actors.db.store import Store

    store = Store(url)
    cluster = ClusterStore(store)
    try:
        ids = make_sessions(store, FENCED_SESSIONS)
        cluster.register_daemon("writer", "bench", os.getpid(), "bench", T0)
        epochs = dict(cluster.claim(ids, "writer", T0, LEASE_S))
        rows = [ids[i % FENCED_SESSIONS] for i in range(FENCED_BATCH)]
        values = ", ".join(["(%s, 'assistant', %s, 0, now(), %s)"] * FENCED_BATCH)
        sql = ("INSERT INTO session_messages (session_id, role, content, cost_usd, timestamp, writer_epoch) "
               f"VALUES {values}")
        text = "a message of ordinary length " * 4
        times: dict[str, list[float]] = {"no_epoch": [], "epoch": []}
        for _ in range(runs):
            for mode in times:  # interleaved, so both see the same table size
                params = [x for sid in rows for x in (sid, text, epochs[sid] if mode == "epoch" else None)]
                with store.transaction():
                    t0 = now()
                    store.db.execute_sql(sql, params)
                    times[mode].append((now() - t0) * 1000)
        plain, fenced = median(times["no_epoch"]), median(times["epoch"])
        return {"rows_per_statement": FENCED_BATCH, "sessions": FENCED_SESSIONS,
                "no_epoch_ms": round(plain, 2), "epoch_ms": round(fenced, 2),
                "trigger_us_per_row": round((fenced - plain) * 1000 / FENCED_BATCH, 2)}
    finally:
        store.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    sessions = 1_000 if args.quick else SESSIONS
    runs = 10 if args.quick else RUNS
    single = 200 if args.quick else SINGLE_CLAIMS
    base = pg_url()
    load_before = loadavg()
    results: dict[str, Any] = {}
    for part in ("heartbeat", "claim", "sweep", "fencing"):
        schema = f"bench_cluster_{uuid.uuid4().hex[:10]}"
        _admin(base, f'CREATE SCHEMA "{schema}"')
        try:
            url = _schema_url(base, schema)
            if part == "heartbeat":
                results[part] = heartbeat_bench(url, sessions, runs)
            elif part == "claim":
                results[part] = claim_bench(url, sessions, single)
            elif part == "sweep":
                results[part] = sweep_bench(url, ENDED // 10 if args.quick else ENDED)
            else:
                results[part] = fencing_bench(url, runs)
        finally:
            _admin(base, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    version = _server_version(base)
    heartbeat_ms = results["heartbeat"]["one_daemon"]["statement_ms"]["median"]
    return {
        "name": "cluster", "machine": machine(), "postgresql": version, "load_before": load_before,
        "sessions": sessions, "runs": runs, **results,
        "goal": f"one heartbeat statement renewing {sessions:,} leases: median under {GOAL_HEARTBEAT_MS} ms; "
                "no session claimed twice",
        "met": heartbeat_ms < GOAL_HEARTBEAT_MS and results["claim"]["failover"]["claimed_twice"] == 0,
        "command": ".venv/bin/python -m bench.cluster",
    }


def _server_version(base: str) -> str:
    import psycopg2

    conn = psycopg2.connect(base)
    with conn.cursor() as cur:
        cur.execute("SHOW server_version")
        version = str(cur.fetchone()[0])
    conn.close()
    return version


if __name__ == "__main__":
    cli(run)
