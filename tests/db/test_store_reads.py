"""Store.messages (every role, in order, with timestamps) and Store.delete_session, on
every backend (the ``store`` fixture of tests/db/conftest.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from freezegun import freeze_time

from corvid_actors.db.store import Store

T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_messages_returns_every_role_in_write_order_with_aware_timestamps(store: Store) -> None:
    session = store.create_session()
    other = store.create_session()
    written = [("user", "hi"), ("assistant", "hello"), ("system", "note"), ("operator_output", "{}"),
               ("user", "bye")]
    for i, (role, content) in enumerate(written):
        with freeze_time(T0 + timedelta(seconds=i)):
            store.append_message(session.id, role, content)
            store.append_message(other.id, "user", f"other {i}")
    messages = store.messages(session.id)
    assert [(m.role, m.content) for m in messages] == written
    assert [m.timestamp for m in messages] == [T0 + timedelta(seconds=i) for i in range(5)]
    assert all(m.timestamp.tzinfo is not None for m in messages)
    assert [m.id for m in messages] == sorted(m.id for m in messages)
    assert store.messages("missing") == []


def test_messages_are_stored_stripped_of_history_blocks(store: Store) -> None:
    session = store.create_session()
    store.append_message(session.id, "user", "<conversation_history>old</conversation_history>new")
    [message] = store.messages(session.id)
    assert "old" not in message.content and "new" in message.content


def test_delete_session_removes_its_messages_and_nothing_else(store: Store) -> None:
    gone, kept = store.create_session(), store.create_session()
    for s in (gone, kept):
        store.append_message(s.id, "user", "hello")
    assert store.delete_session(gone.id) is True
    assert store.get_session(gone.id) is None
    assert store.messages(gone.id) == [] and store.count_messages(gone.id) == 0
    assert store.delete_session(gone.id) is False
    assert store.get_session(kept.id) is not None and len(store.messages(kept.id)) == 1
