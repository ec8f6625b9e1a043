"""Forward migrations recorded in ``schema_version`` (SQLite; PostgreSQL in test_store_postgres)."""

from __future__ import annotations

import threading
from datetime import datetime
from types import SimpleNamespace

import peewee as pw
import pytest

from corvid_actors.db import migrations
from corvid_actors.db.store import Store
from corvid_actors.errors import AgentSettingError, StoreError
from tests.db.conftest import run_together


def recorded_versions(store: Store) -> list[int]:
    V = store.m.SchemaVersion
    return [row.version for row in V.select().order_by(V.version)]


def test_fresh_database_records_every_migration() -> None:
    store = Store()
    try:
        count = len(migrations.MIGRATIONS)
        assert store.schema_version == count
        assert recorded_versions(store) == list(range(1, count + 1))
        assert migrations.current_version(store.m) == count
        tables = set(store.db.get_tables())
        assert {m._meta.table_name for m in store.m.all} <= tables
        indexes = {ix.name for ix in store.db.get_indexes("session_messages")}
        assert "session_messages_session_id_id" in indexes
    finally:
        store.close()


def test_reopening_applies_nothing_twice(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    first = Store(url)
    session = first.create_session(name="survivor")
    first.append_message(session.id, "user", "kept")
    first.close()

    second = Store(url)
    try:
        assert second.schema_version == len(migrations.MIGRATIONS)
        assert recorded_versions(second) == list(range(1, len(migrations.MIGRATIONS) + 1))
        assert second.get_session(session.id).name == "survivor"
        assert second.recent_messages(session.id, 5) == [("user", "kept")]
    finally:
        second.close()


def _add_notes_table(calls: list[int]):
    def add_notes(models: SimpleNamespace, db: pw.Database) -> None:
        calls.append(1)
        db.execute_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")

    return add_notes


def test_appended_migration_runs_once_on_reopen(tmp_path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    Store(url).close()
    base = len(migrations.MIGRATIONS)
    calls: list[int] = []
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, _add_notes_table(calls)])

    upgraded = Store(url)
    upgraded.db.execute_sql("INSERT INTO notes (body) VALUES ('n1')")
    upgraded.close()
    again = Store(url)
    try:
        assert calls == [1]
        assert again.schema_version == base + 1
        assert recorded_versions(again) == list(range(1, base + 2))
        assert again.db.execute_sql("SELECT body FROM notes").fetchall() == [("n1",)]
    finally:
        again.close()


def test_failing_migration_raises_store_error_and_changes_nothing(tmp_path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    Store(url).close()
    base = len(migrations.MIGRATIONS)

    def half_done(models: SimpleNamespace, db: pw.Database) -> None:
        db.execute_sql("CREATE TABLE half (id INTEGER PRIMARY KEY)")
        raise ValueError("bad data in row 7")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, half_done])
    with pytest.raises(StoreError) as info:
        Store(url)
    assert f"schema migration {base + 1} (half_done) failed: bad data in row 7" in str(info.value)
    assert f"stays at version {base}" in str(info.value)

    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:base])
    store = Store(url)
    try:
        assert recorded_versions(store) == list(range(1, base + 1))
        assert "half" not in store.db.get_tables()  # the DDL was rolled back with it
    finally:
        store.close()


def test_concurrent_openers_of_a_fresh_file_migrate_once(tmp_path) -> None:
    # Two processes (daemon, CLI) opening a new database together: one applies the
    # migrations, the others find them applied. Several rounds, since it is a race.
    rounds, openers = 5, 4
    for round_no in range(rounds):
        url = f"sqlite:///{tmp_path / f'race{round_no}.db'}"
        opened: list[Store] = []
        lock = threading.Lock()

        def open_one(url: str = url, opened: list[Store] = opened, lock=lock) -> None:
            store = Store(url)
            with lock:
                opened.append(store)

        try:
            errors = run_together([open_one] * openers)
        finally:
            for store in opened:
                store.close()

        assert errors == []
        check = Store(url)
        try:
            assert recorded_versions(check) == list(range(1, len(migrations.MIGRATIONS) + 1))
            assert check.db.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            check.close()


def test_a_version_3_database_gets_the_open_turns_column(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    session = old.create_session(name="from before")
    old.db.execute_sql("DROP TRIGGER corvid_open_turn")  # version 3 had neither (migration 18 counts open_turns)
    old.db.execute_sql("DROP TRIGGER corvid_close_turn")  # nor this one (migration 21 closes them)
    old.db.execute_sql("ALTER TABLE sessions DROP COLUMN open_turns")  # as version 3 made it
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 4).execute()
    old.close()

    store = Store(url)
    try:
        assert recorded_versions(store)[:4] == [1, 2, 3, 4]
        assert "open_turns" in {c.name for c in store.db.get_columns("sessions")}
        assert store.get_session(session.id).open_turns == 0
        store.open_turn(session.id, total_turns=1)
        store.open_turn(session.id, total_turns=2)
        store.add_session_usage(session.id, turns=1, answered=True)
        assert store.get_session(session.id).open_turns == 1
        store.add_session_usage(session.id, turns=1, answered=False)  # a failed turn stays open
        assert store.get_session(session.id).open_turns == 1
        for _ in range(2):  # never below zero
            store.add_session_usage(session.id, turns=1, answered=True)
        assert (store.get_session(session.id).open_turns, store.get_session(session.id).total_turns) == (0, 2)
    finally:
        store.close()


def test_a_version_12_database_gets_the_agents_double_texting_column(tmp_path) -> None:
    # issue 35 item 6: nullable (NULL: [agents] double_texting, else by the agent's kind);
    # the migration is idempotent, so a merge may renumber it
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    agent = old.create_agent("from before")
    old.db.execute_sql('ALTER TABLE agents DROP COLUMN "double_texting"')
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version > 12).execute()
    old.close()

    store = Store(url)
    try:
        assert recorded_versions(store)[-1] == len(migrations.MIGRATIONS)
        assert store.get_agent(agent.id).double_texting is None
        assert store.update_agent(agent.id, double_texting="reject").double_texting == "reject"
        with pytest.raises(AgentSettingError, match="double_texting 'later' is not one of enqueue, interrupt, reject"):
            store.update_agent(agent.id, double_texting="later")
    finally:
        store.close()


def test_a_version_11_database_gets_the_agents_access_columns(tmp_path) -> None:
    # migration 12 (issue 35 item 7): nullable columns, NULL meaning the [access] config's value
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    agent = old.create_agent("from before")
    spent = old.create_session(name="spent", agent_id=agent.id)
    old.add_session_usage(spent.id, cost_usd=0.25, turns=1)
    for column in migrations._AGENT_ACCESS_COLUMNS:  # as version 11 made the table
        old.db.execute_sql(f'ALTER TABLE agents DROP COLUMN "{column}"')
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 12).execute()
    old.close()

    store = Store(url)
    try:
        # the agents' kind, double texting, idle due, ownership history
        assert recorded_versions(store)[11:16] == [12, 13, 14, 15, 16]
        assert set(migrations._AGENT_ACCESS_COLUMNS) <= {c.name for c in store.db.get_columns("agents")}
        row = store.get_agent(agent.id)
        assert (row.conversation_mode, row.conversation_allowlist, row.max_budget_usd) == (None, None, None)
        row = store.update_agent(agent.id, conversation_mode="allowlist", conversation_allowlist=["bob"],
                                 max_total_budget_usd=1.5)
        assert (row.conversation_mode, row.conversation_allowlist, row.max_total_budget_usd) == (
            "allowlist", '["bob"]', 1.5)
        assert store.agent_spend_usd(agent.id) == 0.25
        assert store.spend_by_agent() == {agent.id: 0.25}
    finally:
        store.close()


def test_a_version_14_database_gets_the_leases_idle_deadline(tmp_path) -> None:
    # the idle exit's durable timer (issue 36 item 1): a nullable column, NULL for every lease
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    session = old.create_session(name="leased")
    old.db.execute_sql("INSERT INTO session_leases (session_id, epoch) VALUES (?, 3)", (session.id,))
    old.db.execute_sql('ALTER TABLE session_leases DROP COLUMN "idle_due_at"')
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 15).execute()
    old.close()

    store = Store(url)
    try:
        assert recorded_versions(store)[-1] == len(migrations.MIGRATIONS)
        assert "idle_due_at" in {c.name for c in store.db.get_columns("session_leases")}
        lease = store.m.SessionLease.get(store.m.SessionLease.session == session.id)
        assert (lease.epoch, lease.idle_due_at) == (3, None)
    finally:
        store.close()


def test_a_version_15_database_gets_the_ownership_history(tmp_path) -> None:
    # issue 36 items 8 and 7: a table of its own and its index of open rows, and the
    # leases' offered_to (a rebalance's hand-over, nullable); idempotent (the
    # baseline of this version makes the table, the migration finds it there)
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    session = old.create_session(name="ran")
    old.db.execute_sql("DROP TABLE session_ownership")
    old.db.execute_sql('ALTER TABLE session_leases DROP COLUMN "offered_to"')
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 16).execute()
    old.close()

    store = Store(url)
    try:
        assert recorded_versions(store)[15] == 16 and recorded_versions(store)[-1] == len(migrations.MIGRATIONS)
        assert {"session_ownership_open", "sessionownership_session_id_id"} <= {
            ix.name for ix in store.db.get_indexes("session_ownership")}
        H = store.m.SessionOwnership
        H.create(session=session.id, daemon_id="a", epoch=1, started_at=datetime(2026, 3, 1), reason_in="start")
        assert [(row.daemon_id, row.ended_at) for row in H.select()] == [("a", None)]
        assert "offered_to" in {c.name for c in store.db.get_columns("session_leases")}  # item 7's hand-over
        migrations._session_ownership(store.m, store.db)  # again: nothing changes
        assert H.select().count() == 1
    finally:
        store.close()


def test_a_version_19_database_gets_the_hand_off_buffer(tmp_path) -> None:
    # issue 36 item 2: held_messages, a table of its own; idempotent (the baseline of this
    # version makes it, the migration finds it there)
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    session = old.create_session(name="moving")
    old.db.execute_sql("DROP TABLE held_messages")
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 20).execute()
    old.close()

    store = Store(url)
    try:
        assert recorded_versions(store)[19:20] == [20]
        H = store.m.HeldMessage
        H.create(session=session.id, content="kept", held_by="a")
        assert [(row.content, row.held_by) for row in H.select()] == [("kept", "a")]
        migrations._held_messages(store.m, store.db)  # again: nothing changes
        assert H.select().count() == 1
    finally:
        store.close()


def _schema(store: Store) -> tuple[list[tuple], list[tuple]]:
    master = store.db.execute_sql("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    versions = store.db.execute_sql("SELECT version, breaking FROM schema_version ORDER BY version").fetchall()
    return master, versions


def test_an_in_memory_store_gets_the_schema_migrate_makes() -> None:
    # in-memory stores copy a database migrated once per process (every simulation opens
    # one); passing the migrations explicitly runs them on the new database itself
    copied, migrated = Store(), Store(migrations=migrations.MIGRATIONS)
    try:
        assert _schema(copied) == _schema(migrated)
        assert copied.schema_version == migrated.schema_version == len(migrations.MIGRATIONS)
        session = copied.create_session(name="works")  # and it is a database of its own
        assert copied.get_session(session.id).name == "works" and migrated.get_session(session.id) is None
        assert Store().get_session(session.id) is None
    finally:
        copied.close()
        migrated.close()


def test_an_appended_migration_reaches_in_memory_stores_too(monkeypatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, _add_notes_table(calls)])
    store = Store()
    try:
        assert store.schema_version == len(migrations.MIGRATIONS)
        store.db.execute_sql("INSERT INTO notes (body) VALUES ('n1')")
    finally:
        store.close()


def test_a_version_17_database_gets_the_turn_opening_column_and_trigger(tmp_path) -> None:
    # migration 18 (issue 37 item 2): a nullable column and a trigger that fires only for it
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    session = old.create_session(name="from before")
    old.append_message(session.id, "user", "before the upgrade")
    old.db.execute_sql("DROP TRIGGER corvid_open_turn")  # as version 17 made the table
    old.db.execute_sql('ALTER TABLE session_messages DROP COLUMN "opens_turn"')
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 18).execute()
    old.close()

    store = Store(url)
    try:
        assert recorded_versions(store)[17:18] == [18]
        assert "opens_turn" in {c.name for c in store.db.get_columns("session_messages")}
        row = store.get_session(session.id)
        assert (row.open_turns, row.total_turns) == (0, 0)  # the old rows count nothing
        store.append_user_turn(session.id, "after the upgrade")
        row = store.get_session(session.id)
        assert (row.open_turns, row.total_turns) == (1, 1)
    finally:
        store.close()


def test_a_version_20_database_gets_the_turn_closing_column_and_trigger(tmp_path) -> None:
    # migration 21 (issue 36 item 2): a reply closes its turn in its own statement; a
    # nullable column and a trigger that fires only for it, so the previous release's
    # replies (NULL) go on closing their turns with the usage write
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    session = old.create_session(name="from before")
    old.append_user_turn(session.id, "before the upgrade")
    old.db.execute_sql("DROP TRIGGER corvid_close_turn")  # as version 20 made the table
    old.db.execute_sql('ALTER TABLE session_messages DROP COLUMN "closes_turn"')
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 21).execute()
    old.close()

    store = Store(url)
    try:
        assert recorded_versions(store)[-1] == len(migrations.MIGRATIONS) >= 21
        assert "closes_turn" in {c.name for c in store.db.get_columns("session_messages")}
        assert store.get_session(session.id).open_turns == 1  # the old rows change nothing
        store.append_message(session.id, "assistant", "as the previous release replies")
        assert store.get_session(session.id).open_turns == 1
        store.append_message(session.id, "assistant", "after the upgrade", closes_turn=True)
        assert store.get_session(session.id).open_turns == 0
        migrations._session_message_closes_turn(store.m, store.db)  # again: nothing changes
        store.append_user_turn(session.id, "one more")
        store.append_message(session.id, "assistant", "closed once", closes_turn=True)
        assert store.get_session(session.id).open_turns == 0
    finally:
        store.close()
