"""A running store rereads the schema's version (issue 36, item 6), on a real PostgreSQL:
code that opened a database another release then migrated — with a migration marked
breaking, or by more than one release — learns it at its next check (every heartbeat:
``Store.check_schema``, one row) or its next reconnect, and says why it must take no new
work (``schema_refusal``). A newer release's additive migrations change nothing."""

from __future__ import annotations

from types import SimpleNamespace

import peewee as pw
import pytest

from corvid_actors.db.migrations import MIGRATIONS, breaking
from corvid_actors.db.store import Store
from corvid_actors.testing.tcp_proxy import TcpProxy

pytestmark = pytest.mark.postgres

N = len(MIGRATIONS)


def _notes_table(models: SimpleNamespace, db: pw.Database) -> None:
    db.execute_sql("CREATE TABLE IF NOT EXISTS notes (id BIGSERIAL PRIMARY KEY, body TEXT)")


@breaking
def _breaking_notes_table(models: SimpleNamespace, db: pw.Database) -> None:
    db.execute_sql("CREATE TABLE IF NOT EXISTS other_notes (id BIGSERIAL PRIMARY KEY, body TEXT)")


def upgrade(url: str, *extra, release: str) -> None:
    """Another release (one that knows ``extra`` migrations more) opens the database."""
    Store(url, migrations=[*MIGRATIONS, *extra], release=release).close()


def test_a_breaking_migration_applied_by_another_release_is_refused_at_the_next_check(pg_url):
    running = Store(pg_url)
    try:
        assert running.check_schema() is None and running.schema_refusal is None
        upgrade(pg_url, _breaking_notes_table, release="next")
        assert running.schema_refusal is None  # nothing read yet
        refusal = running.check_schema()
        assert refusal is not None and f"a migration past {N} is breaking" in refusal
        assert running.schema_refusal == refusal
        assert running.check_schema() == refusal  # it stays refused
    finally:
        running.close()


def test_additive_migrations_of_the_next_release_are_run_on(pg_url):
    running = Store(pg_url)
    try:
        upgrade(pg_url, _notes_table, _notes_table, release="next")  # two migrations, one release
        assert running.check_schema() is None
        upgrade(pg_url, _notes_table, _notes_table, _notes_table, release="after next")  # two releases ahead
        refusal = running.check_schema()
        assert refusal is not None and "migrated by 2 newer releases" in refusal
    finally:
        running.close()


def test_a_reconnect_rereads_the_schema(pg_url):
    with TcpProxy("127.0.0.1", 5432) as proxy:
        running = Store(proxy.url(pg_url))
        try:
            sid = running.create_session(name="before").id
            upgrade(pg_url, _breaking_notes_table, release="next")
            assert proxy.cut() >= 1  # the connection is lost (an upgrade restarting the server)
            assert running.get_session(sid).name == "before"  # reconnected and replayed
            assert running.schema_refusal is not None and "is breaking" in running.schema_refusal
        finally:
            running.close()
