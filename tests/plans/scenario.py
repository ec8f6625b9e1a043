"""What a running bot and a cluster ask of the store: every distinct statement, with the
parameters of its first use, for the query-plan guards (test_query_plans_*.py here)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from corvid_actors.chat import ChatBridge, MemoryTransport
from corvid_actors.config import Config
from corvid_actors.db.cluster import ClusterStore, Deadline
from corvid_actors.db.store import Store
from corvid_actors.testing import ScriptedProvider, SimClock, sim_runtime

#: tables whose rows grow with users, conversations and the sessions a cluster ran
GROWING = ("sessions", "session_messages", "credit_transactions", "credit_ledger", "session_leases")

Statements = dict[str, Any]


@contextmanager
def recording(store: Store, into: Statements) -> Iterator[None]:
    """Every statement ``store`` executes meanwhile (first parameters kept), observed at
    peewee's ``execute_sql`` (nothing of ours is replaced)."""
    execute = store.db.execute_sql

    def record(sql: str, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        into.setdefault(sql, params)
        return execute(sql, params, *args, **kwargs)

    store.db.execute_sql = record  # type: ignore[method-assign]
    try:
        yield
    finally:
        del store.db.execute_sql  # the class's method again


def bot_day(store_url: str = "sqlite:///:memory:", *, plan: Callable[[Store, Statements], Any]) -> Any:
    """A chat bot with credits and eight sessions through crashes, outages, resumes and
    inactivity stops, on ``store_url``; ``plan(store, statements)`` runs before the store
    closes and its result is returned."""
    clock = SimClock()
    model = ScriptedProvider(clock, default_reply="fine")
    cfg = Config().replace(credits={"credits_per_turn": 1, "low_credit_threshold": 3,
                                    "free_credits_on_first_message": 10})
    rt = sim_runtime(clock, model, config=cfg, with_credits=True, store_url=store_url)
    store = rt.internals.store
    statements: Statements = {}
    transport = MemoryTransport()
    bridge = ChatBridge(rt, transport).start()
    rng = random.Random(3)
    try:
        with recording(store, statements):
            sessions = [rt.create_session(source="chat", name=f"s{i}", session_id=f"session-{i}")
                        for i in range(8)]
            for i, s in enumerate(sessions):
                if i % 3 == 0:
                    model.crash("boom", match=f"[{s.id} t1]", latency_s=5)
                if i % 4 == 1:
                    model.outage("503", match=f"[{s.id} t2]", latency_s=5)
            for hour in range(6):
                for who in ("alice", "bob", "carol"):
                    transport.say(who, f"hello at {hour}")
                    rt.settle()
                for s in sessions:
                    text = f"[{s.id} t{hour % 3}] hi"
                    if not rt.send_message(s.id, text):
                        rt.resume_process(s.id, text)
                    clock.advance(rng.uniform(60, 900))
                clock.advance(3600)
            assert transport.texts("alice", kind="reply"), "the bot answered"
        return plan(store, statements)
    finally:
        rt.shutdown()
        bridge.stop()
        clock.close()


def cluster_day(store: Store, statements: Statements) -> None:
    """Three daemons on ``store``: registration, claims, heartbeats, timers, a daemon that
    dies and is swept, a drain (release) and sessions ending (finish)."""
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    lease_s = 15.0
    daemons = {name: ClusterStore(store) for name in ("a", "b", "c")}
    with recording(store, statements):
        for name, cluster in daemons.items():
            cluster.register_daemon(name, "host", 1, "test", t0)
        a, b, c = daemons.values()
        sids = [store.create_session(name=f"c{i}").id for i in range(12)]
        claims = a.claim(sids[:6], "a", t0, lease_s) + b.claim(sids[6:], "b", t0, lease_s)
        epochs = dict(claims)
        a.set_timers("a", sids[0], epochs[sids[0]], restart_due_at=t0 + timedelta(seconds=30))
        a.set_inactivity_deadlines("a", [Deadline(sid, epochs[sid], t0 + timedelta(minutes=30)) for sid in sids[:6]])
        for step in range(1, 4):
            for name in ("b", "c"):
                daemons[name].heartbeat(name, t0 + timedelta(seconds=5 * step), lease_s)
        later = t0 + timedelta(seconds=20)
        c.expire_dead_daemons(later, 60.0, sparing="c")
        live = c.live_daemons(later, 60.0)
        c.claim_expired("c", later, lease_s, len(live), 1000)
        c.live_daemon_versions(later, 60.0)
        c.place_new_session(later, 60.0, 1000)
        c.owner_of(sids[0])
        c.leases(sids)
        b.owned_by("b")
        b.finish("b", sids[6:8], now=later)
        b.release("b", sids[8:10], now=later)
        b.release("b", now=later)
        c.claim_unleased_resumes("c", later, lease_s)
