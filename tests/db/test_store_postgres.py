"""PostgreSQL-only behaviour: migrations, concurrent openers and writers over a URL.

The common store behaviour runs on PostgreSQL through the parametrized ``store`` fixture
(test_store.py). Every test here gets a fresh schema (``pg_url``, tests/db/conftest.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace

import peewee as pw
import pytest

from corvid_actors.db import migrations
from corvid_actors.db.store import Store
from corvid_actors.errors import StoreError
from tests.db.conftest import run_together

pytestmark = pytest.mark.postgres

def recorded_versions(store: Store) -> list[int]:
    V = store.m.SchemaVersion
    return [row.version for row in V.select().order_by(V.version)]


def test_store_lives_in_the_url_schema(pg_url: str, open_store) -> None:
    store = open_store(pg_url)

    assert not store.is_sqlite
    schema = pg_url.rsplit("search_path%3D", 1)[1]
    assert store.db.execute_sql("SELECT current_schema()").fetchone()[0] == schema
    tables = {row[0] for row in store.db.execute_sql(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))}
    assert {m._meta.table_name for m in store.m.all} <= tables


def test_migrations_recorded_once_across_reopen(pg_url: str, open_store, monkeypatch) -> None:
    first = open_store(pg_url)
    session = first.create_session(name="survivor")
    first.close()
    base = len(migrations.MIGRATIONS)
    calls: list[int] = []

    def add_notes(models: SimpleNamespace, db: pw.Database) -> None:
        calls.append(1)
        db.execute_sql("CREATE TABLE notes (id SERIAL PRIMARY KEY, body TEXT NOT NULL)")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, add_notes])
    upgraded = open_store(pg_url)
    upgraded.close()
    again = open_store(pg_url)

    assert calls == [1]
    assert again.schema_version == base + 1
    assert recorded_versions(again) == list(range(1, base + 2))
    assert again.get_session(session.id).name == "survivor"
    assert again.db.execute_sql("SELECT count(*) FROM notes").fetchone()[0] == 0


def test_failing_migration_rolls_back_its_ddl(pg_url: str, open_store, monkeypatch) -> None:
    open_store(pg_url).close()
    base = len(migrations.MIGRATIONS)

    def half_done(models: SimpleNamespace, db: pw.Database) -> None:
        db.execute_sql("CREATE TABLE half (id SERIAL PRIMARY KEY)")
        raise ValueError("cannot convert column")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, half_done])
    with pytest.raises(StoreError, match=f"schema migration {base + 1} \\(half_done\\) failed"):
        Store(pg_url)
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:base])

    store = open_store(pg_url)
    assert recorded_versions(store) == list(range(1, base + 1))
    assert "half" not in store.db.get_tables(schema=pg_url.rsplit("search_path%3D", 1)[1])


def test_concurrent_openers_of_a_fresh_schema_migrate_once(pg_url: str) -> None:
    openers = 4
    opened: list[Store] = []
    lock = threading.Lock()

    def open_one() -> None:
        store = Store(pg_url)
        with lock:
            opened.append(store)

    try:
        errors = run_together([open_one] * openers)
    finally:
        for store in opened:
            store.close()

    assert errors == []
    check = Store(pg_url)
    try:
        assert recorded_versions(check) == list(range(1, len(migrations.MIGRATIONS) + 1))
    finally:
        check.close()


def test_concurrent_writers_from_two_stores(pg_url: str, open_store) -> None:
    daemon, cli = open_store(pg_url), open_store(pg_url)
    sessions, per_session, cli_rounds = 30, 10, 10
    sids = [daemon.create_session(name=f"s{i}").id for i in range(sessions)]

    def writer(sid: str) -> Callable[[], None]:
        def run() -> None:
            for k in range(per_session):
                daemon.append_message(sid, "user", f"{sid}:{k}")
            daemon.add_session_usage(sid, cost_usd=0.25, turns=1)

        return run

    def other_process() -> None:
        for k in range(cli_rounds):
            session = cli.create_session(name=f"cli{k}")
            cli.append_message(session.id, "user", "from the cli")
            cli.update_session(session.id, status="running")
            cli.reset_stale_sessions()
            cli.take_restart_pending()
            cli.add_session_usage(sids[0], turns=1)

    errors = run_together([writer(sid) for sid in sids] + [other_process])

    assert errors == []
    assert all(daemon.count_messages(sid) == per_session for sid in sids)
    assert daemon.m.SessionMessage.select().count() == sessions * per_session + cli_rounds
    assert daemon.get_session(sids[0]).cumulative_turns == 1 + cli_rounds
    assert [c for _, c in daemon.recent_messages(sids[-1], 100)] == [
        f"{sids[-1]}:{k}" for k in range(per_session)]


def test_content_blocks_migration_on_an_older_database(pg_url: str, open_store) -> None:
    from tests.db.test_multimodal_messages import BLOCKS, downgrade_to_before_content_blocks

    old = open_store(pg_url)
    session = old.create_session(name="from before")
    old.append_message(session.id, "user", "an old message")
    downgrade_to_before_content_blocks(old)
    old.close()
    upgraded = open_store(pg_url)
    assert upgraded.schema_version == len(migrations.MIGRATIONS)
    upgraded.append_message(session.id, "user", BLOCKS)
    assert upgraded.message_contents(session.id, 5) == [("user", "an old message"), ("user", BLOCKS)]
