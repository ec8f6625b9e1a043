"""A turn opened and closed by the database, in the statement of the message that does it.

Opening (issue 37): ``Runtime.send_message`` to a running session stores the message with
``opens_turn`` set; an ``AFTER INSERT`` trigger on ``session_messages`` then adds one to
the session's ``open_turns`` and ``total_turns`` (and stamps ``updated_at``) in the same
statement. So the turn count is committed with the message, atomically — a crash between
the insert and the turn's start still finds the turn open, and the restart resumes it —
and the session actor only counts it in memory: no second write per turn, and no write of
the session's own on the sender's path.

Closing (issue 36 item 2): the session's reply to a turn — the assistant message its
result follows — is stored with ``closes_turn`` set, and a second trigger takes one off
``open_turns`` (never below zero) in the reply's own statement. The reply and its turn's
close are one commit, whatever carries it (the writer's batch, a group commit, a direct
insert): a crash can no longer leave the reply stored and its turn open, which made the
next owner's resume — it answers every open turn — answer the message a second time.

On PostgreSQL the message's insert is fenced first (the ``BEFORE INSERT`` trigger of
:mod:`corvid_actors.db.fencing`): a stale owner's message, and so its turn's opening or
closing, is refused whole. Neither trigger's ``UPDATE`` names ``writer_epoch``, so the
sessions table's own fence does not run for it (the row's fence already did).
"""

from __future__ import annotations

import peewee as pw

#: the opening trigger's name, on both databases
TRIGGER_NAME = "corvid_open_turn"
#: the closing trigger's name, on both databases
CLOSE_TRIGGER_NAME = "corvid_close_turn"

_OPEN_SET = "open_turns = open_turns + 1, total_turns = total_turns + 1, updated_at = NEW.timestamp"
_CLOSE_SET = ("open_turns = CASE WHEN open_turns > 1 THEN open_turns - 1 ELSE 0 END, "
              "updated_at = NEW.timestamp")

_SQLITE = """
CREATE TRIGGER IF NOT EXISTS {name} AFTER INSERT ON session_messages
FOR EACH ROW WHEN NEW.{column}
BEGIN
    UPDATE sessions SET {set} WHERE id = NEW.session_id;
END
"""

_PG_FUNCTION = """
CREATE OR REPLACE FUNCTION {schema}.{name}() RETURNS trigger LANGUAGE plpgsql AS $turn$
BEGIN
    UPDATE {schema}.sessions SET {set} WHERE id = NEW.session_id;
    RETURN NULL;
END
$turn$
"""


def install_turn_opening(db: pw.Database) -> None:
    """Create (or replace) the trigger that counts a turn open. Idempotent."""
    _install(db, TRIGGER_NAME, "opens_turn", _OPEN_SET)


def install_turn_closing(db: pw.Database) -> None:
    """Create (or replace) the trigger that closes a turn with its reply. Idempotent."""
    _install(db, CLOSE_TRIGGER_NAME, "closes_turn", _CLOSE_SET)


def _install(db: pw.Database, name: str, column: str, assignments: str) -> None:
    if isinstance(db, pw.SqliteDatabase):
        db.execute_sql(_SQLITE.format(name=name, column=column, set=assignments))
        return
    schema = '"' + db.execute_sql("SELECT current_schema()").fetchone()[0].replace('"', '""') + '"'
    db.execute_sql(_PG_FUNCTION.format(schema=schema, name=name, set=assignments))
    db.execute_sql(f'DROP TRIGGER IF EXISTS {name} ON {schema}."session_messages"')
    db.execute_sql(
        f'CREATE TRIGGER {name} AFTER INSERT ON {schema}."session_messages" FOR EACH ROW '
        f"WHEN (NEW.{column}) EXECUTE FUNCTION {schema}.{name}()")
