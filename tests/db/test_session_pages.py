"""Issue 39: ``Store.page_sessions`` (the HTTP API's sessions page) on every backend —
keyset pages, newest activity first, equal times ordered by id, filters and search — and
the API tokens' rows (``db.api_tokens``)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from corvid_actors.db.api_tokens import ApiTokenStore, token_hash
from corvid_actors.errors import ConflictError

T0 = datetime(2026, 3, 1)


def _fill(store, n: int) -> list[str]:
    S = store.m.Session
    agent = store.create_agent("pager")
    ids = []
    for i in range(n):
        sid = f"s{i:03d}"
        # pairs of sessions share an update time: the id breaks the tie
        S.create(id=sid, agent=agent.id if i % 2 else None, name=f"job {i}", status="idle" if i % 3 else "stopped",
                 source="chat" if i % 2 else "web", participant="alice" if i == 7 else "",
                 created_at=T0, updated_at=T0 + timedelta(seconds=i // 2))
        ids.append(sid)
    return ids


def _walk(store, limit: int, **filters) -> list[str]:
    seen, after = [], None
    while True:
        rows = store.page_sessions(limit=limit, after=after, **filters)
        seen += [r.id for r in rows]
        if len(rows) < limit:
            return seen
        after = (rows[-1].updated_at, rows[-1].id)


def test_pages_walk_every_session_once_newest_first_ties_by_id(store):
    ids = _fill(store, 21)
    newest_first = sorted(ids, key=lambda sid: (int(sid[1:]) // 2, sid), reverse=True)
    for limit in (1, 4, 50):
        assert _walk(store, limit) == newest_first


def test_pages_filter_by_status_agent_source_and_search(store):
    ids = _fill(store, 12)
    agent = store.find_agent("pager")
    assert set(_walk(store, 3, status="stopped")) == {ids[i] for i in range(12) if i % 3 == 0}
    assert set(_walk(store, 3, agent_id=agent.id)) == {ids[i] for i in range(12) if i % 2}
    assert set(_walk(store, 3, source="web")) == {ids[i] for i in range(12) if i % 2 == 0}
    assert _walk(store, 3, query="alice") == [ids[7]]
    assert _walk(store, 3, query="job 1") == ["s011", "s010", "s001"]


def test_token_rows_keep_only_the_hash_and_names_are_unique(store):
    tokens = ApiTokenStore(store)
    secret = tokens.create("ops", "operate", now=T0)
    assert [(t.name, t.scope, t.token_hash) for t in tokens.active()] == [("ops", "operate", token_hash(secret))]
    with pytest.raises(ConflictError):
        tokens.create("ops", "read")
    tokens.touch("ops", T0 + timedelta(minutes=1))
    assert tokens.revoke("ops", now=T0 + timedelta(minutes=2)) is True
    assert tokens.active() == []
    [row] = tokens.list_tokens()
    assert row["last_used_at"].startswith("2026-03-01T00:01") and row["revoked_at"].startswith("2026-03-01T00:02")
