"""The send lane (db/send_lane.py) and the turn a user message opens (db/turn_opening.py):
a send commits on a connection of its own, never behind a session's write, and its turn
is counted open in the message's own statement (issue 37 item 2)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from corvid_actors.db.store import Store
from corvid_actors.errors import StoreError

#: bound on every wait of these tests (seconds): a send that blocks fails instead of hanging
WAIT_S = 5.0


def _turns(store: Store, sid: str) -> tuple[int, int]:
    row = store.get_session(sid)
    return (row.open_turns, row.total_turns)


def test_a_user_turn_is_stored_with_its_turn_counted_open(store: Store) -> None:
    sid = store.create_session(name="a").id
    first = store.append_user_turn(sid, "hello")
    second = store.append_user_turn(sid, "again")
    assert second > first
    assert [(m.role, m.content) for m in store.messages(sid)] == [("user", "hello"), ("user", "again")]
    assert _turns(store, sid) == (2, 2)
    store.add_session_usage(sid, turns=1, answered=True)  # the first turn's result closes it
    assert _turns(store, sid) == (1, 2)


def test_a_plain_append_counts_no_turn(store: Store) -> None:
    # the previous release's writes (and every other message) leave opens_turn NULL
    sid = store.create_session(name="a").id
    store.append_message(sid, "user", "from the supervisor")
    store.append_message(sid, "assistant", "a reply")
    assert _turns(store, sid) == (0, 0)


def test_a_taken_back_turn_is_deleted_and_uncounted(store: Store) -> None:
    sid = store.create_session(name="a").id
    kept = store.append_user_turn(sid, "kept")
    refused = store.append_user_turn(sid, "refused")
    store.take_back_user_turn(sid, refused)
    assert [m.id for m in store.messages(sid)] == [kept]
    assert _turns(store, sid) == (1, 1)
    store.take_back_user_turn(sid, kept - 1000)  # not one of its turns: nothing changes
    assert _turns(store, sid) == (1, 1)


def test_a_send_to_a_missing_session_fails_and_stores_nothing(store: Store) -> None:
    with pytest.raises(StoreError):
        store.append_user_turn("no-such-session", "hello")
    sid = store.create_session(name="a").id
    store.append_user_turn(sid, "still works")
    assert _turns(store, sid) == (1, 1)


def test_the_turn_opened_by_the_sender_survives_a_crash_before_the_turn_starts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    store = Store(url)
    sid = store.create_session(name="a").id
    store.append_user_turn(sid, "answer me")
    # the process dies here: no session actor ever saw the message (no close, no writer flush)
    store.send_lane.close()
    reopened = Store(url)
    try:
        row = reopened.get_session(sid)
        assert (row.open_turns, row.total_turns) == (1, 1)  # a restart resumes it mid-turn
        assert reopened.last_message_role(sid) == "user"
    finally:
        reopened.close()
        store.close()


def test_a_send_completes_while_a_session_write_is_held_inside_the_store(tmp_path: Path) -> None:
    """A session's write holds the store's lock (as its UPDATE or the writer's batch does
    while it runs); a send to another session commits meanwhile, and is readable by
    another connection before the held write is let go."""
    path = tmp_path / "corvid.db"
    store = Store(f"sqlite:///{path}")
    try:
        busy = store.create_session(name="busy").id
        other = store.create_session(name="other").id
        held, release = threading.Event(), threading.Event()

        def session_write() -> None:
            with store.lock:  # inside the store, mid-write
                held.set()
                release.wait(WAIT_S)
            store.add_session_usage(busy, cost_usd=0.5, turns=1)

        writer = threading.Thread(target=session_write)
        writer.start()
        assert held.wait(WAIT_S)
        sent: list[int] = []
        sender = threading.Thread(target=lambda: sent.append(store.append_user_turn(other, "hi")))
        sender.start()
        sender.join(WAIT_S)
        try:
            assert not sender.is_alive(), "the send waited for the session's write"
            with sqlite3.connect(path) as reader:  # committed: another connection sees it
                assert reader.execute("SELECT content FROM session_messages WHERE id = ?", sent).fetchone() == ("hi",)
                assert reader.execute("SELECT open_turns, total_turns FROM sessions WHERE id = ?",
                                      (other,)).fetchone() == (1, 1)
        finally:
            release.set()
            writer.join(WAIT_S)
            sender.join(WAIT_S)
        assert store.get_session(busy).total_cost_usd == 0.5
    finally:
        store.close()


def test_concurrent_sends_share_commits_and_each_is_acknowledged(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corvid.db'}")
    try:
        sids = [store.create_session(name=f"s{i}").id for i in range(8)]
        ids: dict[str, list[int]] = {sid: [] for sid in sids}
        errors: list[BaseException] = []

        def send(sid: str) -> None:
            try:
                for n in range(20):
                    ids[sid].append(store.append_user_turn(sid, f"{sid} {n}"))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=send, args=(sid,)) for sid in sids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S)
        assert not errors and not any(t.is_alive() for t in threads)
        for sid in sids:  # each acknowledged id is its own committed message, in order
            assert [m.id for m in store.messages(sid)] == ids[sid]
            assert [m.content for m in store.messages(sid)] == [f"{sid} {n}" for n in range(20)]
            assert _turns(store, sid) == (20, 20)
    finally:
        store.close()


def test_a_closed_store_refuses_sends(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corvid.db'}")
    sid = store.create_session(name="a").id
    store.close()
    with pytest.raises(StoreError):
        store.append_user_turn(sid, "too late")
