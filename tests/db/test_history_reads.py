"""A resume's history read costs the same for a session of 200 messages and of 20,000.

A cold resume reads, in one statement, the session's last exit notes (``system``
messages, for the zero-turn breaker) and its recent history (``Store.recent_messages_of``).
A long chat session has thousands of messages and few or no system ones: "the last 5
system messages" must not walk the whole session backwards to find there are none (it
did, through the ``(session_id, id)`` index: 5.6 ms a resume at 20,000 messages, against
8 µs at none). The work is measured in the database's own units, not in seconds: SQLite's
virtual machine instructions (a progress handler), PostgreSQL's rows read and thrown
away by a filter (``EXPLAIN ANALYZE``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from corvid_actors.db.store import Store
from tests.db.db_work import sqlite_steps

SHORT, LONG = 200, 20_000
#: the resume's read: (roles, limit) for the exit notes, then for the history
READS = ((("system",), 5), (("user", "assistant"), 50))


def _fill(store: Store, session_id: str, n: int) -> None:
    turns = [(session_id, "user", "question " * 8), (session_id, "assistant", "answer " * 30)]
    for _ in range(n // 1000):
        store.append_messages(turns * 500)


def _sqlite_steps(store: Store, session_id: str) -> int:
    """SQLite VM instructions (in units of 100) the read takes."""
    return sqlite_steps(store, lambda: store.recent_messages_of(session_id, READS))[1]


def _postgres_filtered_rows(store: Store, session_id: str) -> int:
    """Rows PostgreSQL read and threw away by a filter (every node of the plan)."""
    store.recent_messages_of(session_id, READS)  # its statement is built and cached
    [sql] = [s for key, s in store._sql_cache.items() if key[0] == "recent_messages_of"]
    params: list[Any] = []
    for roles, limit in READS:
        params += (session_id, *roles, limit)
    store.db.execute_sql("ANALYZE session_messages")
    [[plan]] = store.db.execute_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def removed(node: dict[str, Any]) -> int:
        return int(node.get("Rows Removed by Filter", 0)) + sum(removed(child) for child in node.get("Plans", ()))

    return removed(plan[0]["Plan"])


def test_the_resume_read_does_not_walk_a_long_history_without_exit_notes(store: Store) -> None:
    short, long = store.create_session(), store.create_session()
    _fill(store, short.id, 1000)
    _fill(store, long.id, LONG)
    store.append_message(long.id, "user", "the newest")
    notes, history = store.recent_messages_of(long.id, READS)
    assert notes == [] and len(history) == 50 and history[-1] == ("user", "the newest")
    if store.is_sqlite:
        work_short, work_long = _sqlite_steps(store, short.id), _sqlite_steps(store, long.id)
        # the same work, whatever the length (before: ×20 for ×20 the messages)
        assert work_long <= 2 * work_short + 5, (work_short, work_long)
    else:
        assert _postgres_filtered_rows(store, long.id) < 1000


@pytest.mark.parametrize("notes_at", ["start", "end"])
def test_exit_notes_are_the_newest_system_messages_wherever_they_are(store: Store, notes_at: str) -> None:
    session = store.create_session()
    notes = [(session.id, "system", f"exit {i}") for i in range(7)]
    chat = [(session.id, "user", "hi"), (session.id, "assistant", "hello")] * 100
    store.append_messages(notes + chat if notes_at == "start" else chat + notes)
    got_notes, history = store.recent_messages_of(session.id, READS)
    assert got_notes == [("system", f"exit {i}") for i in range(2, 7)]
    assert history == [("user", "hi"), ("assistant", "hello")] * 25
