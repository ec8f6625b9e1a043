"""Forward-only schema migrations, recorded in ``schema_version``.

Migration 1 creates the baseline schema. A later migration is a function appended to
:data:`MIGRATIONS`; it receives the store's models and database and runs inside a
transaction. Opening a store applies every migration newer than the recorded version,
all in one transaction under an exclusive lock (see :func:`migrate`).

**Rolling upgrades (issue 20): one release of skew.** Several daemons share one PostgreSQL,
and they are upgraded one at a time: the first daemon of a newer release migrates the
database while the older ones keep running on it. So every migration is *additive* — it
adds tables, nullable (or defaulted) columns, indexes, triggers that pass the older code's
writes — and code runs unchanged (no migration, a warning in the log) on a database that
migrations of at most :data:`RELEASES_AHEAD` newer release have moved ahead, however many
migrations that release added: each applied migration records the release that applied it
(``schema_version.release``). The code refuses, with
:class:`~corvid_actors.errors.SchemaTooNew`, a database migrated by more newer releases, or
one where a migration it does not know is marked :func:`breaking` (``schema_version.breaking``):
such a database needs every daemon upgraded before it starts again.
``tests/db/test_migration_contract.py`` checks that every migration not marked breaking only adds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from types import SimpleNamespace

import peewee as pw
from loguru import logger

from corvid_actors.db.fencing import install_fencing
from corvid_actors.db.turn_opening import install_turn_closing, install_turn_opening
from corvid_actors.errors import SchemaTooNew, StoreError

Migration = Callable[[SimpleNamespace, pw.Database], None]

#: how many newer releases may have migrated a database the code still runs on
RELEASES_AHEAD = 1
#: the attribute :func:`breaking` sets on a migration function
_BREAKING = "breaks_previous_version"


def breaking(migration: Migration) -> Migration:
    """Mark ``migration`` as one the code of the previous schema version cannot run on
    (it drops, renames or tightens something). The database records it, and that code
    then refuses to open it (:func:`schema_verdict`): upgrade every daemon before it starts."""
    setattr(migration, _BREAKING, True)
    return migration


def is_breaking(migration: Migration) -> bool:
    """Was ``migration`` marked with :func:`breaking`?"""
    return bool(getattr(migration, _BREAKING, False))


def current_release() -> str:
    """The installed corvid-actors release (recorded with each migration it applies)."""
    try:
        return version("corvid-actors")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def schema_verdict(known: int, found: int, breaking_ahead: bool, releases_ahead: int) -> str | None:
    """Whether code that knows ``known`` migrations may run on a database at version
    ``found``; None if it may (migrating it first when ``found < known``), else why not.
    ``breaking_ahead``: one of the migrations past ``known`` is marked breaking;
    ``releases_ahead``: how many releases applied the migrations past ``known``."""
    if found <= known:
        return None
    if releases_ahead > RELEASES_AHEAD:
        return (f"the database's schema is at version {found} (this corvid-actors knows {known}), migrated by "
                f"{releases_ahead} newer releases; it runs on a database at most {RELEASES_AHEAD} release ahead: "
                "upgrade corvid-actors to the release of the daemons that migrated it")
    if breaking_ahead:
        return (f"the database's schema is at version {found}, and a migration past {known} is breaking: this "
                f"corvid-actors (schema {known}) cannot run on it; upgrade corvid-actors to the release of "
                "the daemons that migrated it")
    return None


def running_schema_verdict(db: pw.Database, known: int) -> str | None:
    """:func:`schema_verdict` for code already running on ``db`` (issue 36): another release
    may have migrated it since this code opened it. One row read, cheap enough for every
    heartbeat and every reconnect. None: it may run on (or ``schema_version`` is missing)."""
    p = db.param
    row = db.execute_sql(
        "SELECT MAX(version), "
        f"MAX(CASE WHEN version > {p} AND breaking THEN 1 ELSE 0 END), "
        f"COUNT(DISTINCT CASE WHEN version > {p} THEN COALESCE(release, 'before-release-column:' || version) END) "
        "FROM schema_version", (known, known)).fetchone()
    if row is None or row[0] is None:
        return None
    return schema_verdict(known, int(row[0]), bool(row[1]), int(row[2] or 0))


def _baseline(models: SimpleNamespace, db: pw.Database) -> None:
    db.create_tables([m for m in models.all if m is not models.SchemaVersion], safe=True)


def _session_message_order_index(models: SimpleNamespace, db: pw.Database) -> None:
    # History reads are "last N messages of a session": index (session_id, id).
    db.execute_sql(
        "CREATE INDEX IF NOT EXISTS session_messages_session_id_id ON session_messages (session_id, id)"
    )


def _session_message_content_blocks(models: SimpleNamespace, db: pw.Database) -> None:
    # Multimodal user messages keep their blocks (issue 12). A database created by the
    # baseline of this version has the column already.
    if "content_blocks" not in {c.name for c in db.get_columns("session_messages")}:
        db.execute_sql('ALTER TABLE "session_messages" ADD COLUMN "content_blocks" TEXT')


def _session_open_turns(models: SimpleNamespace, db: pw.Database) -> None:
    # sessions.open_turns: a restart resumes with a model call only a session mid-turn.
    # A database made by this version's baseline has the column already.
    if "open_turns" not in {c.name for c in db.get_columns("sessions")}:
        db.execute_sql("ALTER TABLE sessions ADD COLUMN open_turns INTEGER NOT NULL DEFAULT 0")


def _webhook_replays(models: SimpleNamespace, db: pw.Database) -> None:
    # The webhook's replay store: accepted signatures until their timestamps expire.
    db.create_tables([models.WebhookReplay], safe=True)


#: room left in each page of session_leases for heartbeat updates (PostgreSQL, percent filled)
_LEASE_FILLFACTOR = 50


def _cluster_leases(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 20: the daemons sharing a database, the session leases with their fencing
    # epoch and durable timers, the writer_epoch columns the fenced writes carry, and (on
    # PostgreSQL) the fencing triggers. Only additions, so the previous version keeps
    # running on this schema. A database made by this version's baseline has the tables
    # and columns already.
    db.create_tables([models.Daemon, models.SessionLease], safe=True)
    for table in ("sessions", "session_messages", "credit_transactions"):
        if "writer_epoch" not in {c.name for c in db.get_columns(table)}:
            db.execute_sql(f'ALTER TABLE "{table}" ADD COLUMN "writer_epoch" BIGINT')
    if isinstance(db, pw.PostgresqlDatabase):
        # A heartbeat rewrites every lease of a daemon; with free room in the page (and no
        # index on lease_expires_at) PostgreSQL updates them in place (HOT), no index writes.
        db.execute_sql(f"ALTER TABLE session_leases SET (fillfactor = {_LEASE_FILLFACTOR})")
        install_fencing(db)


def _cluster_bus(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 20: the cross-daemon transport's tables (commands forwarded to another daemon,
    # events too large for one NOTIFY; see db/pg_bus.py). Only CREATE ... IF NOT EXISTS of
    # its own tables, with no foreign keys: it may run before or after the other issue-20
    # migrations, and a database made by this version's baseline has the tables already.
    db.create_tables([models.ClusterCommand, models.ClusterEvent], safe=True)


def _cluster_commands_created_at(models: SimpleNamespace, db: pw.Database) -> None:
    # The bus's purge (db/pg_bus_purge.py) takes old command rows by created_at: a range
    # scan of this index, not a scan of the table. The name is the one the baseline gives it.
    db.execute_sql("CREATE INDEX IF NOT EXISTS cluster_commands_created_at ON cluster_commands (created_at)")


def _session_message_role_index(models: SimpleNamespace, db: pw.Database) -> None:
    # "The last N messages of a session with these roles" (a resume's exit notes, the last
    # user message): index (session_id, role, id). Through (session_id, id) alone, a role
    # the session has few or none of walked its whole history backwards on every resume.
    db.execute_sql("CREATE INDEX IF NOT EXISTS session_messages_session_id_role_id "
                   "ON session_messages (session_id, role, id)")


def _session_channel_index(models: SimpleNamespace, db: pw.Database) -> None:
    # "The newest session of this channel" (a chat bridge's conversation on a cache miss,
    # an agent's session for a sender): index (channel, source, created_at). Without it
    # the read scanned every session row.
    db.execute_sql("CREATE INDEX IF NOT EXISTS sessions_channel_source_created_at "
                   "ON sessions (channel, source, created_at)")


def _session_lease_held_index(models: SimpleNamespace, db: pw.Database) -> None:
    # A failover sweep counts and claims held leases (an expiry set). Ended sessions keep
    # their lease rows (epochs only grow), so the table holds every session the cluster
    # ever ran, and the sweep, every few seconds on every daemon, read all of them: index
    # the held ones, and only them.
    if isinstance(db, pw.PostgresqlDatabase):
        # The heartbeat rewrites every held lease's expiry every few seconds: an index that
        # names the expiry (in its key or its condition) would make those updates leave the
        # heap page (no HOT). A stored generated column, which changes only when a lease
        # is taken or ended, carries the condition instead.
        if "held" not in {c.name for c in db.get_columns("session_leases")}:
            db.execute_sql("ALTER TABLE session_leases ADD COLUMN held BOOLEAN "
                           "GENERATED ALWAYS AS (lease_expires_at IS NOT NULL) STORED")
        db.execute_sql("CREATE INDEX IF NOT EXISTS session_leases_held ON session_leases (session_id) WHERE held")
    else:
        db.execute_sql("CREATE INDEX IF NOT EXISTS session_leases_held ON session_leases (session_id) "
                       "WHERE lease_expires_at IS NOT NULL")


#: the agents' access, rate limit and budget columns (migration 12), all nullable
_AGENT_ACCESS_COLUMNS = {
    "conversation_mode": "VARCHAR(20)", "conversation_allowlist": "TEXT",
    "conversation_rate_limit_window_s": "FLOAT", "conversation_rate_limit_max": "INTEGER",
    "max_budget_usd": "FLOAT", "max_total_budget_usd": "FLOAT",
}


def _agent_access(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 35 item 7: who may talk to an agent, how often, for how much. Nullable
    # columns (NULL: the [access] config's value), so the previous release runs on.
    # A database made by this version's baseline has them already.
    present = {c.name for c in db.get_columns("agents")}
    for name, kind in _AGENT_ACCESS_COLUMNS.items():
        if name not in present:
            db.execute_sql(f'ALTER TABLE "agents" ADD COLUMN "{name}" {kind}')


def _agent_kind(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 35 item 1: an agent is a "task" or a "chat" agent. Nullable (NULL: the
    # [agents] default_kind), so the previous release runs on. Migration 13, after the
    # access columns (12). A database made by this version's baseline has the column
    # already.
    if "kind" not in {c.name for c in db.get_columns("agents")}:
        db.execute_sql('ALTER TABLE "agents" ADD COLUMN "kind" VARCHAR(20)')


def _agent_double_texting(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 35 item 6: what a session does with a message that arrives mid-turn. A
    # nullable column (NULL: [agents] double_texting, else by the agent's kind), so the
    # previous release runs on. Migration 14, after the agents' kind (13).
    if "double_texting" not in {c.name for c in db.get_columns("agents")}:
        db.execute_sql('ALTER TABLE "agents" ADD COLUMN "double_texting" VARCHAR(20)')


def _session_lease_idle_due(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 36 item 1: the idle exit is a durable timer too (the lease's idle_due_at).
    # Nullable, so the previous release runs on; a database made by this version's
    # baseline has it already. Migration 15, after the agents' double texting (14).
    if "idle_due_at" not in {c.name for c in db.get_columns("session_leases")}:
        db.execute_sql('ALTER TABLE "session_leases" ADD COLUMN "idle_due_at" TIMESTAMP')



def _session_ownership(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 36 items 8 and 7: where each session ran (db/ownership.py). A table of its own, and
    # its index of the open rows by daemon (a drain or a restart closes all of a daemon's
    # rows); the previous release never reads it. Migration 16, after the leases' idle
    # deadline (15); a database made by this version's baseline has the table already.
    # Item 7: a lease released for a rebalance is offered to one daemon (nullable: the
    # previous release's sweeps take such a lease as any released one).
    db.create_tables([models.SessionOwnership], safe=True)
    if "offered_to" not in {c.name for c in db.get_columns("session_leases")}:
        db.execute_sql('ALTER TABLE "session_leases" ADD COLUMN "offered_to" VARCHAR(200)')
    db.execute_sql("CREATE INDEX IF NOT EXISTS session_ownership_open ON session_ownership (daemon_id, session_id) "
                   "WHERE ended_at IS NULL")

def _api_tokens_and_session_pages(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 39: the HTTP API's bearer tokens (hashed), and the indexes its sessions page
    # walks: newest activity first, keyset-paged on (updated_at, id), all of them or one
    # status / agent / source. A database made by this version's baseline has the table.
    db.create_tables([models.ApiToken], safe=True)
    db.execute_sql("CREATE INDEX IF NOT EXISTS sessions_updated_at_id ON sessions (updated_at, id)")
    for column in ("status", "agent_id", "source"):
        db.execute_sql(f"CREATE INDEX IF NOT EXISTS sessions_{column}_updated_at_id "
                       f"ON sessions ({column}, updated_at, id)")


def _session_message_opens_turn(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 37 item 2: a user message sent to a running session opens its turn in the same
    # statement (the row's opens_turn and an AFTER INSERT trigger counting it in the
    # session's row). A nullable column and a trigger that only fires for it: the previous
    # release's inserts leave it NULL and run on. A database made by this version's
    # baseline has the column already (not the trigger).
    if "opens_turn" not in {c.name for c in db.get_columns("session_messages")}:
        kind = "INTEGER" if isinstance(db, pw.SqliteDatabase) else "BOOLEAN"
        db.execute_sql(f'ALTER TABLE "session_messages" ADD COLUMN "opens_turn" {kind}')
    install_turn_opening(db)


def _journal_entries(models: SimpleNamespace, db: pw.Database) -> None:
    # issue 40: the journal of what the outside world said to each session (record and replay)
    db.create_tables([models.JournalEntry], safe=True)


def _held_messages(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 36 item 2: a message sent to a session between owners is held here until its
    # next owner takes it (db/held.py). A table of its own; the previous release never
    # reads it (a message held while it still runs waits for an upgraded owner). A
    # database made by this version's baseline has the table already.
    db.create_tables([models.HeldMessage], safe=True)


def _session_message_closes_turn(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 36 item 2: a session's reply closes its turn in the same statement (the row's
    # closes_turn and an AFTER INSERT trigger taking the turn off open_turns), so a crash
    # never leaves a reply stored with its turn open. A nullable column and a trigger that
    # only fires for it: the previous release's replies leave it NULL and close their
    # turns with the usage write, as before. A database made by this version's baseline
    # has the column already (not the trigger).
    if "closes_turn" not in {c.name for c in db.get_columns("session_messages")}:
        kind = "INTEGER" if isinstance(db, pw.SqliteDatabase) else "BOOLEAN"
        db.execute_sql(f'ALTER TABLE "session_messages" ADD COLUMN "closes_turn" {kind}')
    install_turn_closing(db)


def _agent_revision(models: SimpleNamespace, db: pw.Database) -> None:
    # Issue 37 item 1: every agent write bumps its revision in the same statement, and a
    # session's start reads it with the session's row, so each process caches what an
    # incarnation builds from its agent (wiring.BuildCache) and an agent changed by any
    # daemon on the same database is never served stale. NOT NULL DEFAULT 0: the previous
    # release's writes leave it alone (its caches are none). A database made by this
    # version's baseline has the column already.
    if "revision" not in {c.name for c in db.get_columns("agents")}:
        db.execute_sql('ALTER TABLE "agents" ADD COLUMN "revision" INTEGER NOT NULL DEFAULT 0')


MIGRATIONS: list[Migration] = [_baseline, _session_message_order_index, _session_message_content_blocks,
                               _session_open_turns, _webhook_replays, _cluster_leases, _cluster_bus,
                               _cluster_commands_created_at, _session_message_role_index,
                               _session_channel_index, _session_lease_held_index, _agent_access,
                               _agent_kind, _agent_double_texting, _session_lease_idle_due,
                               _session_ownership, _api_tokens_and_session_pages,
                               _session_message_opens_turn, _journal_entries,
                               _held_messages, _session_message_closes_turn, _agent_revision]


#: key of the PostgreSQL advisory lock that serialises migrations across processes
_PG_MIGRATION_LOCK_KEY = 0x636F7276  # "corv"


def current_version(models: SimpleNamespace) -> int:
    """The highest applied migration number (0 for an empty database)."""
    row = models.SchemaVersion.select(pw.fn.MAX(models.SchemaVersion.version)).scalar()
    return int(row or 0)


@contextmanager
def _exclusive_transaction(db: pw.Database) -> Iterator[None]:
    # Two processes may open a fresh database at once (daemon and CLI). Reading the
    # version and applying migrations must be one exclusive step, or both apply
    # migration 1 and one fails on schema_version's primary key.
    if isinstance(db, pw.SqliteDatabase):
        # IMMEDIATE: take the write lock before reading the version; waits on busy_timeout.
        with db.atomic("IMMEDIATE"):
            yield
        return
    with db.atomic():
        if isinstance(db, pw.PostgresqlDatabase):
            db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_PG_MIGRATION_LOCK_KEY,))
        yield


def migrate(models: SimpleNamespace, db: pw.Database, migrations: Sequence[Migration] | None = None,
            release: str | None = None) -> int:
    """Apply pending migrations; returns the schema version afterwards.

    All pending migrations run in one transaction under an exclusive lock: concurrent
    openers apply each migration exactly once, and a failing migration leaves the
    schema at its previous version. ``migrations`` (default :data:`MIGRATIONS`) is what
    this code knows: a database ahead of it is run on unchanged or refused (see the
    module docstring: SchemaTooNew). ``release``: recorded with each migration applied
    (default: the installed release; a seam for the rolling-upgrade tests).
    """
    known = list(MIGRATIONS if migrations is None else migrations)
    release = release or current_release()
    with _exclusive_transaction(db):
        db.create_tables([models.SchemaVersion], safe=True)
        _ensure_bookkeeping_columns(db)
        version = start = current_version(models)
        if version > len(known):
            return _run_ahead(models, len(known), version)
        for number, migration in enumerate(known, start=1):
            if number <= version:
                continue
            try:
                migration(models, db)
            except pw.OperationalError:
                raise  # the store reports it as "cannot open database …"
            except Exception as exc:
                name = getattr(migration, "__name__", repr(migration))
                raise StoreError(
                    f"schema migration {number} ({name}) failed: {exc}; the database "
                    f"stays at version {start}"
                ) from exc
            models.SchemaVersion.create(version=number, breaking=is_breaking(migration), release=release)
            version = number
    return version


def _ensure_bookkeeping_columns(db: pw.Database) -> None:
    # The migration table's own bookkeeping, before any numbered migration: a database of
    # an earlier release lacks the columns (nullable: that release's inserts omit them).
    columns = {c.name for c in db.get_columns("schema_version")}
    if "breaking" not in columns:
        db.execute_sql("ALTER TABLE schema_version ADD COLUMN breaking BOOLEAN")
    if "release" not in columns:
        db.execute_sql("ALTER TABLE schema_version ADD COLUMN release VARCHAR(64)")


def _run_ahead(models: SimpleNamespace, known: int, found: int) -> int:
    V = models.SchemaVersion
    ahead = list(V.select(V.version, V.breaking, V.release).where(V.version > known))
    breaking_ahead = any(row.breaking for row in ahead)
    # a row without its release (applied by a release before the column) counts as one of its own
    releases_ahead = len({row.release or f"before-release-column:{row.version}" for row in ahead})
    refusal = schema_verdict(known, found, breaking_ahead, releases_ahead)
    if refusal is not None:
        raise SchemaTooNew(refusal)
    logger.warning("the database's schema is at version {} and this corvid-actors knows {}: running on it "
                   "unchanged (a newer release migrated it; upgrade this daemon soon)", found, known)
    return found
