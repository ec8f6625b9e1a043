"""No statement of a running bot reads a whole table that grows with its users.

A chat bot with credits and a simulated day of sessions (resumes, crashes, outages,
inactivity stops) run on SQLite while its connection traces every statement; each one is
then planned (``EXPLAIN QUERY PLAN``). A ``SCAN`` of ``sessions``, ``session_messages`` or
the credit tables (a read of every row, as the chat bridge's conversation lookup was)
fails the test with the statement: a bot with a million conversations would pay for all
of them on every such call. A plan cannot show a range of an index that is walked too
far (the resume's exit-notes read was one: tests/db/test_history_reads.py measures it).
Operator listings are not run here; the plans are SQLite's (tests/db holds PostgreSQL's
for the reads fixed).
"""

from __future__ import annotations

import random
import re

from corvid_actors.chat import ChatBridge, MemoryTransport
from corvid_actors.config import Config
from corvid_actors.testing import ScriptedProvider, SimClock, sim_runtime

#: tables whose rows grow with users and conversations
GROWING = ("sessions", "session_messages", "credit_transactions", "credit_ledger")


def _full_scans(conn, statements: set[str]) -> list[tuple[str, str]]:
    found = []
    for sql in sorted(statements):
        if not re.match(r"\s*(SELECT|UPDATE|DELETE|INSERT)", sql, re.IGNORECASE) or "sqlite_master" in sql:
            continue
        for *_, detail in conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall():
            # "SCAN sessions", "SCAN t1" (an alias): the table behind an alias is named in the SQL
            m = re.match(r"SCAN (\w+)(?: USING (COVERING )?INDEX \w+)?$", detail)
            if m is None:
                continue
            alias = m.group(1)
            table = alias if alias in GROWING else next(
                (t for t in GROWING if re.search(rf'"{t}" AS "{alias}"', sql)), None)
            if table is not None:
                found.append((detail, sql))
    return found


def test_a_chat_bot_and_a_simulated_day_read_no_growing_table_whole() -> None:
    clock = SimClock()
    model = ScriptedProvider(clock, default_reply="fine")
    cfg = Config().replace(credits={"credits_per_turn": 1, "low_credit_threshold": 3,
                                    "free_credits_on_first_message": 10})
    rt = sim_runtime(clock, model, config=cfg, with_credits=True)
    statements: set[str] = set()
    conn = rt.internals.store.db.connection()
    conn.set_trace_callback(statements.add)
    transport = MemoryTransport()
    bridge = ChatBridge(rt, transport).start()
    rng = random.Random(3)
    try:
        sessions = [rt.create_session(source="chat", name=f"s{i}", session_id=f"session-{i}") for i in range(8)]
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
        conn.set_trace_callback(None)
        scans = _full_scans(conn, statements)
    finally:
        conn.set_trace_callback(None)
        rt.shutdown()
        bridge.stop()
        clock.close()
    assert len(statements) > 20
    assert scans == [], "\n".join(f"{detail}: {sql}" for detail, sql in scans)
