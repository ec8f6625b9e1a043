"""Multimodal user messages in the store (issue 12, item 4): kept losslessly, text beside.

``store`` is tests/db/conftest.py's fixture: every backend (SQLite, PostgreSQL)."""

from __future__ import annotations

import pytest

from corvid_actors.db import migrations
from corvid_actors.db.store import Store
from corvid_actors.errors import InvalidContentError

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg=="
BLOCKS = [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    {"type": "text", "text": "And this one — ünïcode?"},
    {"type": "image", "source": {"type": "url", "url": "https://example.org/cat.jpg"}},
]


def test_blocks_are_stored_as_given_and_read_back(store) -> None:
    session = store.create_session(name="pictures")
    store.append_message(session.id, "user", "plain first")
    store.append_message(session.id, "user", BLOCKS)
    store.append_message(session.id, "assistant", "A red pixel and a cat.")
    assert store.message_contents(session.id, 10) == [
        ("user", "plain first"), ("user", BLOCKS), ("assistant", "A red pixel and a cat.")]
    # the text column holds the text parts, joined as the original does (the images are in
    # content_blocks; "[image attachment(s)]" only for a message without text)
    assert store.recent_messages(session.id, 10)[1] == (
        "user", "What is in this picture?\nAnd this one — ünïcode?")


def test_stored_blocks_are_a_copy(store) -> None:
    session = store.create_session(name="pictures")
    blocks = [dict(b) for b in BLOCKS]
    store.append_message(session.id, "user", blocks)
    blocks[0]["text"] = "changed afterwards"
    assert store.message_contents(session.id, 1)[0][1][0]["text"] == "What is in this picture?"


@pytest.mark.parametrize(("content", "says"), [
    ([], "empty list"),
    ([{"type": "video", "url": "x"}], "only 'text' and 'image'"),
    ([{"type": "text"}], "needs a string 'text'"),
    ([{"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": PNG}}], "media_type"),
    ([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}], "base64 'data'"),
    ([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "not base64!"}}],
     "not valid base64"),
    ([{"type": "image", "source": {"type": "url", "url": ""}}], "needs a 'url'"),
    ([{"type": "image", "source": {"type": "file", "path": "/etc/passwd"}}], "'base64' or 'url'"),
    (["just a string in a list"], "must be an object"),
    (b"bytes", "not bytes"),
])
def test_invalid_blocks_are_refused_and_nothing_is_stored(store, content, says) -> None:
    session = store.create_session(name="pictures")
    with pytest.raises(InvalidContentError, match=says):
        store.append_message(session.id, "user", content)
    assert store.count_messages(session.id) == 0


def test_nested_conversation_history_is_stripped_from_text_blocks(store) -> None:
    session = store.create_session(name="pictures")
    text = "<conversation_history>\n[User] old\n</conversation_history>\nnew question"
    store.append_message(session.id, "user", [{"type": "text", "text": text}, BLOCKS[1]])
    [(_, blocks)] = store.message_contents(session.id, 1)
    assert "conversation_history" not in blocks[0]["text"] and "new question" in blocks[0]["text"]


def downgrade_to_before_content_blocks(store: Store) -> None:
    """Make ``store``'s database the one an earlier version left: no column, older schema."""
    store.db.execute_sql('ALTER TABLE "session_messages" DROP COLUMN "content_blocks"')
    number = migrations.MIGRATIONS.index(migrations._session_message_content_blocks) + 1
    store.m.SchemaVersion.delete().where(store.m.SchemaVersion.version >= number).execute()


def test_migration_adds_the_blocks_column_to_an_older_database(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    session = old.create_session(name="from before")
    old.append_message(session.id, "user", "an old message")
    downgrade_to_before_content_blocks(old)
    old.close()

    upgraded = Store(url)
    try:
        assert upgraded.schema_version == len(migrations.MIGRATIONS)
        assert "content_blocks" in {c.name for c in upgraded.db.get_columns("session_messages")}
        upgraded.append_message(session.id, "user", BLOCKS[:2])
        assert upgraded.message_contents(session.id, 5) == [("user", "an old message"), ("user", BLOCKS[:2])]
    finally:
        upgraded.close()
