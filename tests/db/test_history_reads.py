"""A resume's history read costs the same for a session of 200 messages and of 20,000.

A cold resume reads, in one statement, the session's last exit notes (``system``
messages, for the zero-turn breaker) and its recent history (``Store.recent_messages_of``).
A long chat session has thousands of messages and few or no system ones: "the last 5
system messages" must not walk the whole session backwards to find there are none (it
did, through the ``(session_id, id)`` index: 5.6 ms a resume at 20,000 messages, against
8 µs at none). The work is measured in the database's own units, not in seconds: SQLite's
virtual machine instructions, PostgreSQL's rows of the table read (``tests/db/db_work.py``).
"""

from __future__ import annotations

import pytest

from corvid_actors.db.store import Store
from tests.db.db_work import work

SHORT, LONG = 200, 20_000
#: the resume's read: (roles, limit) for the exit notes, then for the history
READS = ((("system",), 5), (("user", "assistant"), 50))


def _fill(store: Store, session_id: str, n: int) -> None:
    turns = [(session_id, "user", "question " * 8), (session_id, "assistant", "answer " * 30)]
    for _ in range(n // 1000):
        store.append_messages(turns * 500)


def test_the_resume_read_does_not_walk_a_long_history_without_exit_notes(store: Store) -> None:
    # measured as the table grows: a read of the whole table must show too
    short = store.create_session()
    _fill(store, short.id, 1000)
    _, work_short = work(store, "session_messages", lambda: store.recent_messages_of(short.id, READS))
    long = store.create_session()
    _fill(store, long.id, LONG)
    store.append_message(long.id, "user", "the newest")
    (notes, history), work_long = work(store, "session_messages", lambda: store.recent_messages_of(long.id, READS))
    assert notes == [] and len(history) == 50 and history[-1] == ("user", "the newest")
    # the same work, whatever the length (before: ×17 on SQLite for ×20 the messages)
    assert work_long <= 2 * work_short + 20, (work_short, work_long)


@pytest.mark.parametrize("notes_at", ["start", "end"])
def test_exit_notes_are_the_newest_system_messages_wherever_they_are(store: Store, notes_at: str) -> None:
    session = store.create_session()
    notes = [(session.id, "system", f"exit {i}") for i in range(7)]
    chat = [(session.id, "user", "hi"), (session.id, "assistant", "hello")] * 100
    store.append_messages(notes + chat if notes_at == "start" else chat + notes)
    got_notes, history = store.recent_messages_of(session.id, READS)
    assert got_notes == [("system", f"exit {i}") for i in range(2, 7)]
    assert history == [("user", "hi"), ("assistant", "hello")] * 25
