"""Finding a conversation's session costs the same among 200 sessions and among 5,000.

A chat bridge maps (channel, participant) to its session, and an agent's message to
another agent reuses the recipient's session of that channel: on a cache miss (first
contact, or the first message after a restart) both ask the store for the newest session
of a channel (``Store.newest_session_id``). With no index on the channel that read
scanned every session row (SQLite ``SCAN`` and a sort; PostgreSQL a sequential scan): a
bot with a million conversations paid for all of them on every new one. Work is measured
in the database's units, not seconds (``tests/db/db_work.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from corvid_actors.db.store import Store
from tests.db.db_work import work

SHORT, LONG = 200, 5_000


def _crowd(store: Store, n: int, prefix: str, fields: dict[str, Any]) -> None:
    """``n`` sessions like the subject's (the same bot, or the same recipient agent) in other
    channels, inserted in bulk: this is the crowd, not the subject."""
    S = store.m.Session
    data = dict(store.create_session(channel=f"{prefix}-template", **fields).__data__)
    rows = [{**data, "id": f"{prefix}-{i}", "channel": f"{prefix}-chan-{i}"} for i in range(n)]
    with store.transaction():
        for start in range(0, n, 500):
            S.insert_many(rows[start:start + 500]).execute()


@pytest.mark.parametrize("kind", ["chat", "agent"])
def test_a_channel_lookup_does_not_read_every_session(store: Store, kind: str) -> None:
    agent = store.create_agent(name="recipient") if kind == "agent" else None
    fields: dict[str, Any] = ({"source": "chat", "name": "tg", "participant": "alice"} if kind == "chat"
                              else {"source": "agent", "agent_id": agent.id})
    lookup = {k: v for k, v in fields.items()}
    done = {}
    for prefix, n in (("few", SHORT), ("many", LONG)):  # the table grows from ~200 rows to ~5,200
        _crowd(store, n, prefix, fields)
        store.create_session(channel=f"{prefix}-subject", **fields)
        newest = store.create_session(channel=f"{prefix}-subject", **fields)
        assert store.newest_session_id(channel=f"{prefix}-subject", **lookup) == newest.id
        found, done[prefix] = work(store, "sessions", lambda: store.newest_session_id(channel="few-subject", **lookup))
        assert found is not None
    assert store.newest_session_id(channel="nobody", **lookup) is None
    assert done["many"] <= 2 * done["few"] + 20, done


def test_the_newest_session_of_a_channel_is_the_last_created_matching_every_field(store: Store) -> None:
    older = store.create_session(source="chat", name="tg", channel="c1", participant="alice")
    store.create_session(source="chat", name="tg", channel="c1", participant="bob")
    store.create_session(source="chat", name="other-bot", channel="c1", participant="alice")
    store.create_session(source="web", name="tg", channel="c1", participant="alice")
    assert store.newest_session_id(source="chat", channel="c1", name="tg", participant="alice") == older.id
    newer = store.create_session(source="chat", name="tg", channel="c1", participant="alice")
    assert store.newest_session_id(source="chat", channel="c1", name="tg", participant="alice") == newer.id
    assert store.newest_session_id(source="chat", channel="c2", name="tg", participant="alice") is None
