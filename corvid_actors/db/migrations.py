"""Forward-only schema migrations, recorded in ``schema_version``.

Migration 1 creates the baseline schema. A later migration is a function appended to
:data:`MIGRATIONS`; it receives the store's models and database and runs inside a
transaction. Opening a store applies every migration newer than the recorded version,
all in one transaction under an exclusive lock (see :func:`migrate`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import peewee as pw

from corvid_actors.db.fencing import install_fencing
from corvid_actors.errors import StoreError

Migration = Callable[[SimpleNamespace, pw.Database], None]


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


MIGRATIONS: list[Migration] = [_baseline, _session_message_order_index, _session_message_content_blocks,
                               _session_open_turns, _webhook_replays, _cluster_leases, _cluster_bus,
                               _cluster_commands_created_at]


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


def migrate(models: SimpleNamespace, db: pw.Database) -> int:
    """Apply pending migrations; returns the schema version afterwards.

    All pending migrations run in one transaction under an exclusive lock: concurrent
    openers apply each migration exactly once, and a failing migration leaves the
    schema at its previous version.
    """
    with _exclusive_transaction(db):
        db.create_tables([models.SchemaVersion], safe=True)
        version = start = current_version(models)
        for number, migration in enumerate(MIGRATIONS, start=1):
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
            models.SchemaVersion.create(version=number)
            version = number
    return version
