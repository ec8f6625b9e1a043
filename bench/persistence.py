"""Benchmark 6 — persistence: session messages persisted per second, SQLite WAL, 200 sessions.

200 threads (one per session, as session actors are) append messages to one store on a
SQLite WAL file, side by side:
- ``group_commit`` (before, issue 18): ``Store(message_writes="group_commit")``: each caller
  blocks until its message committed; callers take turns committing each other's rows;
- ``writer``: the default store: one writer thread commits everything queued; each caller
  still blocks on its own acknowledgement (``append_message``, as ``send_message`` does);
- ``writer_async``: each session queues its messages with ``append_message_async`` and
  takes the acknowledgements from the futures (no caller thread woken per message);
- ``writer_turns``: each call persists one turn's ``TURN_MESSAGES`` messages with
  ``append_messages`` (one acknowledgement per turn).
Every acknowledged id is then re-read through a NEW connection and compared (session,
content): durable means committed and visible to another connection. Any
"database is locked" error is counted. After a small warm-up trial of each mode, the modes
run in interleaved rounds (``bench._paired``); only the writes are timed (wall, and CPU of
every thread), each trial on a fresh database file.

    python -m bench.persistence [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from pathlib import Path
from typing import Any

from bench._common import cli, loadavg, machine, median, now, quiet_logs
from bench._paired import Outcome, compare, cpu_seconds, interleave, spread

SESSIONS = 200
MESSAGES_PER_SESSION = 100
TURN_MESSAGES = 4
TRIALS = 5
WARMUP_PER_SESSION = 5
GOAL_PER_S = 40000.0
#: the writer must also beat the group commit by this much (paired median)
GOAL_SPEEDUP = 2.0


def trial(workdir: Path, mode: str, per_session: int) -> Outcome:
    from corvid_actors.db.store import Store

    url = f"sqlite:///{workdir / f'{mode}.db'}"
    store = Store(url, message_writes="group_commit" if mode == "group_commit" else "writer")
    sids = [store.create_session(name=f"s{i}").id for i in range(SESSIONS)]
    acked: list[dict[int, tuple[str, str]]] = [{} for _ in sids]
    errors: list[str] = []
    barrier = threading.Barrier(SESSIONS + 1)

    def writer(k: int, sid: str) -> None:
        barrier.wait()
        mine = acked[k]
        try:
            if mode == "writer_async":
                texts = [f"{sid}:{m} a message of ordinary length" for m in range(per_session)]
                futures = [store.append_message_async(sid, "user", t) for t in texts]
                for text, future in zip(texts, futures, strict=True):
                    mine[future.result()[0]] = (sid, text)
            elif mode == "writer_turns":
                for turn in range(per_session // TURN_MESSAGES):
                    texts = [f"{sid}:{turn}:{j} a message of ordinary length" for j in range(TURN_MESSAGES)]
                    ids = store.append_messages([(sid, "user" if j == 0 else "assistant", t)
                                                 for j, t in enumerate(texts)])
                    mine.update(zip(ids, [(sid, t) for t in texts], strict=True))
            else:
                for m in range(per_session):
                    text = f"{sid}:{m} a message of ordinary length"
                    mine[store.append_message(sid, "user", text)] = (sid, text)
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=writer, args=(k, sid)) for k, sid in enumerate(sids)]
    for thread in threads:
        thread.start()
    barrier.wait()
    t0, cpu0 = now(), cpu_seconds()
    for thread in threads:
        thread.join()
    elapsed, cpu = now() - t0, cpu_seconds() - cpu0
    batches = store._message_commits.batches if mode == "group_commit" else store.writer.batches
    store.close()
    # durability: every acknowledged row, through a new connection
    reader = Store(url)
    M = reader.m.SessionMessage
    stored = {m.id: (m.session_id, m.content) for m in M.select(M.id, M.session, M.content)}
    reader.close()
    acknowledged = {i: v for part in acked for i, v in part.items()}
    missing = sum(1 for i, v in acknowledged.items() if stored.get(i) != v)
    return Outcome(len(acknowledged), {
        "per_s": len(acknowledged) / elapsed, "acknowledged": len(acknowledged), "missing": missing,
        "errors": len(errors), "locked_errors": sum("locked" in e for e in errors),
        "first_error": errors[0] if errors else "", "commits": batches}, wall_s=elapsed, cpu_s=cpu)


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    per_session = 20 if args.quick else MESSAGES_PER_SESSION
    trials = 3 if args.quick else TRIALS
    load_before = loadavg()
    modes = ("group_commit", "writer", "writer_async", "writer_turns")
    with tempfile.TemporaryDirectory() as tmp:
        made = iter(range(10**6))

        def side(mode: str, size: int) -> Any:
            def go() -> Outcome:
                workdir = Path(tmp) / f"t{next(made)}"
                workdir.mkdir()
                return trial(workdir, mode, size)
            return go
        # warm-up: a small trial of each mode (imports, peewee's query caches, the page cache)
        for mode in modes:
            side(mode, WARMUP_PER_SESSION)()
        rows = interleave({mode: side(mode, per_session) for mode in modes}, trials=trials, warmup=0)
    stats = {}
    for mode, trials_ in rows.items():
        runs = [t.extra for t in trials_]
        stats[mode] = {
            "messages_per_s": round(median([t["per_s"] for t in runs])),
            "messages_per_s_spread": spread([t["per_s"] for t in runs], 0),
            "cpu_us_per_message": round(median([t.per_unit("cpu") * 1e6 for t in trials_]), 1),
            "acknowledged": sum(t["acknowledged"] for t in runs),
            "missing_after_reread": sum(t["missing"] for t in runs),
            "errors": sum(t["errors"] for t in runs), "locked_errors": sum(t["locked_errors"] for t in runs),
            "first_error": next((t["first_error"] for t in runs if t["first_error"]), ""),
            "avg_messages_per_commit": round(sum(t["acknowledged"] for t in runs)
                                             / max(1, sum(t["commits"] for t in runs)), 1),
        }
    paired = [compare(rows, "group_commit", "writer", kind="rate",
                      label="writer thread, blocking callers / group commit (acknowledged msg/s)", digits=2),
              compare(rows, "group_commit", "writer_async", kind="rate",
                      label="writer thread, acknowledgements as futures / group commit (acknowledged msg/s)",
                      digits=2, goal=f"median ≥ {GOAL_SPEEDUP}"),
              compare(rows, "group_commit", "writer_turns", kind="rate",
                      label="writer thread, turn-sized appends / group commit (acknowledged msg/s)", digits=2)]
    best = stats["writer_async"]["messages_per_s"]
    speedup = paired[1]["wall"]["median"]
    clean = all(s["missing_after_reread"] == 0 and s["errors"] == 0 for s in stats.values())
    return {
        "name": "persistence", "machine": machine(), "load_before": load_before, "trials": trials,
        "sessions": SESSIONS, "messages_per_session": per_session, "turn_messages": TURN_MESSAGES,
        "stats": stats, "paired": paired,
        "speedup_writer": paired[0]["wall"]["median"], "speedup_async": speedup,
        "speedup_turns": paired[2]["wall"]["median"],
        "all_durable_no_errors": clean,
        "goal": f"≥ {GOAL_PER_S:,.0f} acknowledged messages/s and ≥ {GOAL_SPEEDUP}× the group commit (paired), "
                "no 'database is locked', every acknowledged message durable",
        "met": clean and best >= GOAL_PER_S and speedup >= GOAL_SPEEDUP,
        "command": ".venv/bin/python -m bench.persistence",
    }


if __name__ == "__main__":
    cli(run)
