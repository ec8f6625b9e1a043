"""Fencing in the database (issue 20): a write of a stale session incarnation is refused.

Every claim of a session adds one to its lease's ``epoch`` (:mod:`corvid_actors.db.cluster`).
A write made for a session incarnation carries that incarnation's epoch in the written
row's ``writer_epoch`` column; on PostgreSQL a ``BEFORE`` trigger compares it with the
lease's current epoch and refuses the write, with SQLSTATE ``CVF01``
(:attr:`~corvid_actors.errors.FencedWrite.SQLSTATE`, raised by the store as
:class:`~corvid_actors.errors.FencedWrite`), when a newer owner has claimed the session.
A write with no epoch (``writer_epoch`` NULL: one daemon, the admin, SQLite) is never
refused; SQLite has no triggers at all (it never runs several daemons).

Why a trigger and not ``WHERE epoch = …`` guards in the statements: the guard would have to
be written into every write path — the message writer's multi-row ``INSERT`` (where one
statement carries rows of many sessions and incarnations), ``executemany``, the ledger's
transaction rows, every ``UPDATE sessions`` — and an ``INSERT … VALUES`` has no ``WHERE``
to put it in. The trigger runs per row for all of them, including paths written later.
Why a column and not ``SET LOCAL corvid.epoch``: one transaction of the writer thread
holds the messages of many sessions, each with its own epoch; a transaction-wide setting
can carry only one.

Tables and events:

- ``session_messages``, ``credit_transactions`` (append-only): ``BEFORE INSERT``; the
  epoch stays in the row (which incarnation wrote it).
- ``sessions`` (status, usage, turn counts …): ``BEFORE UPDATE OF writer_epoch``, i.e. an
  UPDATE that names the column; the trigger then clears it, so the column is NULL at rest
  and a later UPDATE that does not carry an epoch never inherits a stale one.

The trigger reads the lease ``FOR KEY SHARE``: a claim (``SELECT … FOR UPDATE``) and a
fenced write of the same session serialise, so a stale write either commits before the
claim or is refused after it — never committed after the new owner began. Renewing a
lease (an UPDATE of other columns) does not conflict with that lock, so heartbeats never
wait for writers, and claims skip (``SKIP LOCKED``) a lease a write is holding.
"""

from __future__ import annotations

import peewee as pw

from corvid_actors.errors import FencedWrite

#: what the refusal says (format() arguments: session id, current epoch, carried epoch);
#: ``%%`` because the driver reads ``%`` in any statement (peewee always passes parameters)
_REFUSAL = ("'fenced write refused: session %%s was claimed by a newer owner (lease epoch %%s); '"
            " || 'this write carries epoch %%s: its incarnation is stale and must stop'")

_FUNCTION = """
CREATE OR REPLACE FUNCTION {schema}.{name}() RETURNS trigger LANGUAGE plpgsql AS $fence$
DECLARE
    current_epoch bigint;
BEGIN
    SELECT epoch INTO current_epoch FROM {schema}.session_leases
        WHERE session_id = NEW.{key} FOR KEY SHARE;
    IF FOUND AND NEW.writer_epoch < current_epoch THEN
        RAISE EXCEPTION USING ERRCODE = '{sqlstate}',
            MESSAGE = format({refusal}, NEW.{key}, current_epoch, NEW.writer_epoch);
    END IF;
    {after}
    RETURN NEW;
END
$fence$
"""

#: (trigger function, key column, statement run after the check)
_FUNCTIONS = (
    ("corvid_fence_session_row", "id", "NEW.writer_epoch := NULL;  -- a carrier: NULL at rest"),
    ("corvid_fence_session_ref", "session_id", ""),
)

#: (table, trigger events, trigger function, extra WHEN condition)
_TRIGGERS = (
    ("sessions", "UPDATE OF writer_epoch", "corvid_fence_session_row", ""),
    ("session_messages", "INSERT", "corvid_fence_session_ref", ""),
    ("credit_transactions", "INSERT", "corvid_fence_session_ref", " AND NEW.session_id IS NOT NULL"),
)

#: the name of every fencing trigger (one per table)
TRIGGER_NAME = "corvid_fence"


def install_fencing(db: pw.PostgresqlDatabase) -> None:
    """Create (or replace) the fencing functions and triggers in the current schema.

    Idempotent. The functions name their tables with the schema they were created in, so
    they do not depend on the search path of the connection that fires them.
    """
    schema = _quoted(db.execute_sql("SELECT current_schema()").fetchone()[0])
    for name, key, after in _FUNCTIONS:
        db.execute_sql(_FUNCTION.format(schema=schema, name=name, key=key, after=after,
                                        sqlstate=FencedWrite.SQLSTATE, refusal=_REFUSAL))
    for table, events, function, condition in _TRIGGERS:
        db.execute_sql(f'DROP TRIGGER IF EXISTS {TRIGGER_NAME} ON {schema}."{table}"')
        db.execute_sql(
            f'CREATE TRIGGER {TRIGGER_NAME} BEFORE {events} ON {schema}."{table}" FOR EACH ROW '
            f"WHEN (NEW.writer_epoch IS NOT NULL{condition}) EXECUTE FUNCTION {schema}.{function}()")


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'
