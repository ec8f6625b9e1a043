"""Rolling upgrades (issue 20): code of schema version N runs on a database at N + 1 and
refuses N + 2 or a breaking N + 1, on a real PostgreSQL.

"The previous release" is a Store that knows fewer migrations: the ``migrations`` seam of
Store truncates the list it applies and checks against. Its models are this release's
(the seam cannot bring back an older models module), which is faithful while the newer
migrations only add what the older code never names — the rule these tests and
test_migration_contract.py hold the migrations to.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import peewee as pw
import pytest

from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.migrations import MIGRATIONS, SCHEMA_VERSIONS_AHEAD, breaking, schema_verdict
from corvid_actors.db.store import Store
from corvid_actors.errors import SchemaTooNew

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
N = len(MIGRATIONS)


def recorded(store: Store) -> list[tuple[int, bool | None]]:
    V = store.m.SchemaVersion
    return [(row.version, row.breaking) for row in V.select().order_by(V.version)]


def works(store: Store, daemon_id: str) -> None:
    """What a daemon does with its store: a session, its messages, a lease, fenced writes."""
    sid = store.create_session(name=f"made by {daemon_id}").id
    cluster = ClusterStore(store)
    cluster.register_daemon(daemon_id, "host", 1, f"release of schema {len(MIGRATIONS)}", T0)
    [(claimed, epoch)] = cluster.claim([sid], daemon_id, T0, 15.0)
    assert claimed == sid
    store.fence(sid, epoch)
    store.append_message(sid, "user", "hello")
    store.append_message(sid, "assistant", "hi")
    assert store.recent_messages(sid, 5) == [("user", "hello"), ("assistant", "hi")]


def _notes_table(models: SimpleNamespace, db: pw.Database) -> None:
    db.execute_sql("CREATE TABLE IF NOT EXISTS notes (id BIGSERIAL PRIMARY KEY, body TEXT)")


@breaking
def _drop_session_names(models: SimpleNamespace, db: pw.Database) -> None:
    db.execute_sql("ALTER TABLE sessions RENAME COLUMN name TO title")


# --- the rule, by table ---------------------------------------------------------------------------

@pytest.mark.parametrize(("known", "found", "breaking_ahead", "runs"), [
    (8, 3, False, True),   # older database: migrated first
    (8, 8, False, True),
    (8, 9, False, True),   # one ahead, additive: runs unchanged
    (8, 9, True, False),   # one ahead, breaking
    (8, 10, False, False),  # two ahead
])
def test_code_runs_on_a_database_at_most_one_additive_version_ahead(known, found, breaking_ahead, runs) -> None:
    assert SCHEMA_VERSIONS_AHEAD == 1
    assert (schema_verdict(known, found, breaking_ahead) is None) == runs


# --- on PostgreSQL ------------------------------------------------------------------------------

pg = pytest.mark.postgres


@pg
def test_the_previous_release_keeps_running_on_a_database_the_newest_migrated(
        pg_url: str, open_store: Callable[..., Store]) -> None:
    Store(pg_url).close()  # the newest release migrated it: version N

    older = Store(pg_url, migrations=MIGRATIONS[:-1])
    try:
        assert older.schema_version == N
        works(older, "old")
        assert recorded(older) == [(v, False) for v in range(1, N + 1)]  # nothing applied, nothing undone
    finally:
        older.close()


@pg
def test_an_older_daemon_already_running_goes_on_while_a_newer_one_migrates(pg_url: str) -> None:
    older = Store(pg_url, migrations=MIGRATIONS[:-1])
    try:
        assert older.schema_version == N - 1
        newer = Store(pg_url)  # the first daemon of the new release starts
        try:
            assert newer.schema_version == N
            works(older, "old")
            works(newer, "new")
        finally:
            newer.close()
    finally:
        older.close()


@pg
def test_a_release_two_versions_behind_is_refused_and_changes_nothing(pg_url: str) -> None:
    Store(pg_url).close()

    with pytest.raises(SchemaTooNew, match=rf"schema is at version {N}, 2 versions ahead of this corvid-actors "
                                           rf"\(it knows {N - 2}.*upgrade corvid-actors"):
        Store(pg_url, migrations=MIGRATIONS[:-2])

    current = Store(pg_url)
    try:
        assert [v for v, _ in recorded(current)] == list(range(1, N + 1))
    finally:
        current.close()


@pg
def test_a_breaking_migration_is_recorded_and_refused_by_the_previous_release(pg_url: str) -> None:
    newest = Store(pg_url, migrations=[*MIGRATIONS, _drop_session_names])
    try:
        assert recorded(newest)[-1] == (N + 1, True)
    finally:
        newest.close()

    with pytest.raises(SchemaTooNew, match=rf"migration {N + 1} is breaking"):
        Store(pg_url)


@pg
def test_an_additive_migration_ahead_is_run_on(pg_url: str) -> None:
    Store(pg_url, migrations=[*MIGRATIONS, _notes_table]).close()

    store = Store(pg_url)
    try:
        assert store.schema_version == N + 1
        works(store, "current")
    finally:
        store.close()


@pg
def test_a_database_of_a_release_before_the_breaking_column_gets_it(pg_url: str) -> None:
    first = Store(pg_url)
    first.db.execute_sql("ALTER TABLE schema_version DROP COLUMN breaking")
    first.close()

    store = Store(pg_url, migrations=[*MIGRATIONS, _notes_table])
    try:
        assert recorded(store)[-2:] == [(N, None), (N + 1, False)]
    finally:
        store.close()


@pg
def test_the_daemons_table_says_which_version_each_live_daemon_runs(pg_url: str) -> None:
    store = Store(pg_url)
    try:
        cluster = ClusterStore(store)
        cluster.register_daemon("old", "h1", 1, "1.4.0", T0)
        cluster.register_daemon("new", "h2", 2, "1.5.0", T0)
        cluster.register_daemon("gone", "h3", 3, "1.3.0", T0 - timedelta(seconds=120))
        assert cluster.live_daemon_versions(T0, 60.0) == {"new": "1.5.0", "old": "1.4.0"}
    finally:
        store.close()
