"""Shutdown's batched "mark for resume" writes exactly the rows that one update per session did."""

from __future__ import annotations

from typing import Any

from corvid_actors.db.store import Store

#: every column but updated_at (a timestamp of when the write happened)
_COLUMNS = ("id", "status", "pid", "restart_pending", "open_turns", "total_turns", "source", "name")


def _rows(store: Store) -> dict[str, tuple[Any, ...]]:
    S = store.m.Session
    return {row.id: tuple(getattr(row, c) for c in _COLUMNS) for row in S.select()}


def _seed(store: Store) -> list[str]:
    ids = []
    for i, (status, pid, pending) in enumerate([
        ("running", 800001, False), ("running", 800002, False), ("paused", None, False),
        ("error", None, True), ("idle", None, False), ("stopped", None, False), ("running", 800003, False),
    ] * 3):
        sid = f"sess-{i:02d}"
        store.create_session(session_id=sid, source="chat", name=sid)
        store.update_session(sid, status=status, pid=pid, restart_pending=pending, open_turns=i % 2)
        ids.append(sid)
    return ids


def test_batched_marking_equals_per_session_marking(store: Store, open_store) -> None:
    reference = open_store("sqlite:///:memory:")
    ids = _seed(store)
    assert _seed(reference) == ids
    stop = [ids[i] for i in (0, 1, 6, 7, 8, 13, 14, 20)] + ["no-such-session", ids[0]]  # an unknown id, a repeat
    mark = [ids[i] for i in (2, 3, 9, 10, 16)]
    # the per-session writes shutdown made before batching
    for sid in stop:
        reference.update_session(sid, restart_pending=True)
        if reference.get_session(sid) is not None:
            reference.update_session(sid, pid=None, status="stopped")
    for sid in mark:
        reference.update_session(sid, restart_pending=True)
    # batched, in chunks smaller than the lists so that several statements run
    assert store.mark_for_resume(stop, stopped=True, chunk=3) == 8
    assert store.mark_for_resume(mark, chunk=2) == 5
    assert store.mark_for_resume([]) == 0
    assert _rows(store) == _rows(reference)


def test_marking_moves_updated_at(store: Store) -> None:
    sid = store.create_session(source="web").id
    before = store.get_session(sid).updated_at
    store.mark_for_resume([sid], stopped=True)
    row = store.get_session(sid)
    assert (row.status, row.pid, row.restart_pending) == ("stopped", None, True)
    assert row.updated_at >= before
