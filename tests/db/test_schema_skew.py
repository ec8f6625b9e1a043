"""Rolling upgrades (issue 20): code runs on a database that one newer release migrated
(however many migrations it added) and refuses one migrated by two newer releases, or
with a breaking migration it does not know, on a real PostgreSQL.

"The previous release" is a Store that knows fewer migrations: the ``migrations`` seam of
Store truncates the list it applies and checks against, and its ``release`` seam names
the release recorded with what it applies. Its models are this release's
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
from corvid_actors.db.migrations import MIGRATIONS, RELEASES_AHEAD, breaking, schema_verdict
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

@pytest.mark.parametrize(("known", "found", "breaking_ahead", "releases_ahead", "runs"), [
    (8, 3, False, 0, True),   # older database: migrated first
    (8, 8, False, 0, True),
    (8, 9, False, 1, True),   # one release ahead, additive: runs unchanged
    (8, 10, False, 1, True),  # one release that added two migrations: runs unchanged
    (8, 9, True, 1, False),   # one ahead, breaking
    (8, 10, False, 2, False),  # two releases ahead
])
def test_code_runs_on_a_database_at_most_one_additive_release_ahead(known, found, breaking_ahead, releases_ahead,
                                                                     runs) -> None:
    assert RELEASES_AHEAD == 1
    assert (schema_verdict(known, found, breaking_ahead, releases_ahead) is None) == runs


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
def test_a_release_two_releases_behind_is_refused_and_changes_nothing(pg_url: str) -> None:
    Store(pg_url, migrations=MIGRATIONS[:-1], release="0.9").close()
    Store(pg_url, release="1.0").close()  # two releases migrated it past schema N - 2

    with pytest.raises(SchemaTooNew, match=rf"schema is at version {N} \(this corvid-actors knows {N - 2}\), "
                                           r"migrated by 2 newer releases.*upgrade corvid-actors"):
        Store(pg_url, migrations=MIGRATIONS[:-2], release="0.8")

    current = Store(pg_url)
    try:
        assert [v for v, _ in recorded(current)] == list(range(1, N + 1))
    finally:
        current.close()


@pg
def test_one_release_that_added_two_migrations_is_run_on_by_the_previous(pg_url: str) -> None:
    Store(pg_url, migrations=MIGRATIONS[:-2], release="0.9").close()
    Store(pg_url, release="1.0").close()  # one release, two migrations

    previous = Store(pg_url, migrations=MIGRATIONS[:-2], release="0.9")
    try:
        assert previous.schema_version == N
        works(previous, "old")
        V = previous.m.SchemaVersion
        assert [(r.version, r.release) for r in V.select().where(V.version >= N - 2).order_by(V.version)] == [
            (N - 2, "0.9"), (N - 1, "1.0"), (N, "1.0")]
    finally:
        previous.close()


@pg
def test_a_breaking_migration_is_recorded_and_refused_by_the_previous_release(pg_url: str) -> None:
    newest = Store(pg_url, migrations=[*MIGRATIONS, _drop_session_names])
    try:
        assert recorded(newest)[-1] == (N + 1, True)
    finally:
        newest.close()

    with pytest.raises(SchemaTooNew, match=rf"a migration past {N} is breaking"):
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
def test_a_database_of_a_release_before_the_bookkeeping_columns_gets_them(pg_url: str) -> None:
    first = Store(pg_url)
    first.db.execute_sql("ALTER TABLE schema_version DROP COLUMN breaking")
    first.db.execute_sql("ALTER TABLE schema_version DROP COLUMN release")
    first.close()

    store = Store(pg_url, migrations=[*MIGRATIONS, _notes_table], release="1.1")
    try:
        assert recorded(store)[-2:] == [(N, None), (N + 1, False)]
        V = store.m.SchemaVersion
        assert [r.release for r in V.select().where(V.version >= N).order_by(V.version)] == [None, "1.1"]
    finally:
        store.close()
    # code of schema N - 1 counts the row without a release as a release of its own: with 1.1, two
    with pytest.raises(SchemaTooNew, match="2 newer releases"):
        Store(pg_url, migrations=MIGRATIONS[:-1], release="0.9")


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
