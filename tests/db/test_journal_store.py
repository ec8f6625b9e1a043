"""The journal's table on each backend (SQLite in memory and in a file, PostgreSQL): rows
written through the journal writer, read back in order, purged by age; a journaled
session recorded and replayed on that store (issue 40)."""

from __future__ import annotations

import zlib

from corvid_actors.db.journal import JournalStore, decode, encode
from corvid_actors.testing.replay import replay
from tests.replay.recording import record_session


def test_entries_come_back_in_order_compressed_and_by_session(store):
    journal = JournalStore(store)
    try:
        for i in range(50):
            journal.append("s1" if i % 2 else "s2", 1000.0 + i, "model", {"i": i, "text": "hello " * 20})
        journal.flush()
        rows = journal.entries("s1")
        assert [r[2]["i"] for r in rows] == list(range(1, 50, 2))
        assert rows[0][:2] == (1001.0, "model")
        assert set(journal.sessions()) == {"s1", "s2"}
        assert journal.entries("nobody") == []
        # stored compressed: the text repeated 20 times costs less than once uncompressed
        assert journal.size("s1") < 25 * len("hello " * 20)
        blob = encode({"text": "hello " * 20})
        assert decode(blob) == {"text": "hello " * 20} and zlib.decompress(blob).startswith(b'{"text"')
    finally:
        journal.close()


def test_purge_deletes_only_what_is_older(store):
    journal = JournalStore(store)
    try:
        for at in (100.0, 200.0, 300.0):
            journal.append("s", at, "event", {"at": at})
        journal.flush()
        assert journal.purge(250.0) == 2
        assert [r[0] for r in journal.entries("s")] == [300.0]
    finally:
        journal.close()


def test_a_session_journaled_on_this_store_replays(store):
    recording, facts = record_session(store=store)
    assert facts["bytes"] > 0 and len(recording.of("model")) == 4
    assert replay(recording, time_tolerance_s=0.0).events == recording.events


def test_a_database_of_the_previous_version_gets_the_journal_table(tmp_path):
    from corvid_actors.db import migrations
    from corvid_actors.db.store import Store

    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    old.db.execute_sql("DROP TABLE journal_entries")
    version = migrations.MIGRATIONS.index(migrations._journal_entries) + 1  # the later ones run again too
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= version).execute()
    old.close()
    store = Store(url)
    try:
        assert store.schema_version == len(migrations.MIGRATIONS)
        journal = JournalStore(store, writer=False)
        journal.append("s", 1.0, "event", {"type": "session_started"})
        assert journal.entries("s") == [(1.0, "event", {"type": "session_started"})]
    finally:
        store.close()
