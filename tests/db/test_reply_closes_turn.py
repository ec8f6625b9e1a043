"""A session's reply and the close of its turn are one statement (issue 36 item 2's last gap).

The assistant's reply row carries ``closes_turn``; an ``AFTER INSERT`` trigger on
``session_messages`` takes one off the session's ``open_turns`` in the same statement
(db/turn_opening.py), much as a sent user message opens its turn. So no crash can leave
the reply stored and its turn open — the next owner's resume, which answers every open
turn, would answer it again — and on PostgreSQL a stale owner's reply is fenced whole,
its close with it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.store import Store
from corvid_actors.errors import FencedWrite

#: bound on every acknowledgement wait (seconds)
WAIT_S = 5.0


def _open(store: Store, sid: str) -> int:
    return int(store.get_session(sid).open_turns)


def test_a_closing_reply_takes_its_turn_off_the_open_count(store: Store) -> None:
    sid = store.create_session(name="a").id
    store.append_user_turn(sid, "one")
    store.append_user_turn(sid, "two")
    assert _open(store, sid) == 2
    store.append_message(sid, "assistant", "to one", closes_turn=True)
    assert _open(store, sid) == 1
    store.append_message(sid, "assistant", "thinking aloud mid-turn")  # not the turn's reply
    assert _open(store, sid) == 1
    store.append_message(sid, "assistant", "to two", closes_turn=True)
    assert _open(store, sid) == 0
    store.append_message(sid, "assistant", "one close too many", closes_turn=True)
    assert _open(store, sid) == 0  # never below zero
    row = store.get_session(sid)
    assert row.total_turns == 2  # a close counts no turn
    assert [m.content for m in store.messages(sid) if m.role == "assistant"][-1] == "one close too many"


@pytest.mark.parametrize("mode", ["writer", "group_commit", "direct"])
def test_every_message_write_mode_carries_the_close(tmp_path: Path, mode: str) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corvid.db'}", message_writes=mode)
    try:
        a, b = store.create_session(name="a").id, store.create_session(name="b").id
        for sid in (a, b, a):
            store.append_user_turn(sid, "hello")
        store.append_message(a, "assistant", "sync", closes_turn=True)
        acks = [store.append_message_async(a, "assistant", "async", closes_turn=True),
                store.append_message_async(b, "assistant", "not a close"),
                store.append_message_async(b, "assistant", "async", closes_turn=True)]
        for ack in acks:
            ack.result(timeout=WAIT_S)
        assert (_open(store, a), _open(store, b)) == (0, 0)
        assert len(store.messages(a)) == 4 and len(store.messages(b)) == 3
    finally:
        store.close()


def test_a_batch_of_many_sessions_closes_each_ones_turn_in_its_one_commit(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corvid.db'}")
    try:
        sids = [store.create_session(name=f"s{i}").id for i in range(20)]
        for sid in sids:
            store.append_user_turn(sid, "hello")
        rows = tuple((sid, "assistant", f"reply {i}", 0.0, i % 2 == 0) for i, sid in enumerate(sids))
        ids = store._commit_message_groups([rows])[0]  # what the writer thread commits, as one batch
        assert len(ids) == 20
        assert [_open(store, sid) for sid in sids] == [0 if i % 2 == 0 else 1 for i in range(20)]
    finally:
        store.close()


def test_a_crash_right_after_the_reply_finds_its_turn_closed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    store = Store(url)
    sid = store.create_session(name="a").id
    store.append_user_turn(sid, "answer me")
    store.append_message(sid, "assistant", "answered", closes_turn=True)
    # the process dies here, before the turn's usage is written: the close is in already
    reopened = Store(url)
    try:
        assert _open(reopened, sid) == 0
        assert reopened.last_message_role(sid) == "assistant"
    finally:
        reopened.close()
        store.close()


def test_a_failed_closing_reply_leaves_the_turn_open(store: Store) -> None:
    sid = store.create_session(name="a").id
    store.append_user_turn(sid, "answer me")
    with pytest.raises(Exception):  # noqa: B017, PT011 - the store's error for a missing session
        store.append_message("no-such-session", "assistant", "lost", closes_turn=True)
    assert _open(store, sid) == 1


@pytest.mark.postgres
def test_a_stale_owners_closing_reply_is_fenced_with_its_close(pg_url: str,
                                                               open_store: Callable[[str], Store]) -> None:
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    a, b = ClusterStore(open_store(pg_url)), ClusterStore(open_store(pg_url))
    for name, cluster in (("a", a), ("b", b)):
        cluster.register_daemon(name, "host-" + name, 1, "test", t0)
    sid = a.store.create_session(name="moving").id
    ((_, epoch),) = a.claim([sid], "a", t0, 15.0)
    a.store.fence(sid, epoch)
    a.store.append_user_turn(sid, "answer me")
    assert _open(a.store, sid) == 1
    b.claim_expired("b", datetime(2026, 3, 1, 12, 1, tzinfo=UTC), 15.0, 2, 100)  # a paused past its lease

    with pytest.raises(FencedWrite):
        a.store.append_message(sid, "assistant", "late from a", closes_turn=True)
    assert _open(b.store, sid) == 1  # the turn stays open for its new owner to answer
    assert [m.role for m in b.store.messages(sid)] == ["user"]
    b.store.append_message(sid, "assistant", "from b", closes_turn=True)
    assert _open(b.store, sid) == 0
