"""The turn a user message opens, counted by the database in the message's own statement (issue 37).

``Runtime.send_message`` to a running session stores the message with ``opens_turn`` set;
an ``AFTER INSERT`` trigger on ``session_messages`` then adds one to the session's
``open_turns`` and ``total_turns`` (and stamps ``updated_at``) in the same statement. So the
turn count is committed with the message, atomically — a crash between the insert and the
turn's start still finds the turn open, and the restart resumes it — and the session
actor only counts it in memory: no second write per turn, and no write of the session's
own on the sender's path. On PostgreSQL the message's insert is fenced first (the
``BEFORE INSERT`` trigger of :mod:`corvid_actors.db.fencing`): a stale owner's message,
and so its turn, is refused whole.
"""

from __future__ import annotations

import peewee as pw

#: the trigger's name, on both databases
TRIGGER_NAME = "corvid_open_turn"

_SQLITE = f"""
CREATE TRIGGER IF NOT EXISTS {TRIGGER_NAME} AFTER INSERT ON session_messages
FOR EACH ROW WHEN NEW.opens_turn
BEGIN
    UPDATE sessions SET open_turns = open_turns + 1, total_turns = total_turns + 1,
        updated_at = NEW.timestamp WHERE id = NEW.session_id;
END
"""

_PG_FUNCTION = """
CREATE OR REPLACE FUNCTION {schema}.{name}() RETURNS trigger LANGUAGE plpgsql AS $open$
BEGIN
    UPDATE {schema}.sessions SET open_turns = open_turns + 1, total_turns = total_turns + 1,
        updated_at = NEW.timestamp WHERE id = NEW.session_id;
    RETURN NULL;
END
$open$
"""


def install_turn_opening(db: pw.Database) -> None:
    """Create (or replace) the trigger. Idempotent."""
    if isinstance(db, pw.SqliteDatabase):
        db.execute_sql(_SQLITE)
        return
    schema = '"' + db.execute_sql("SELECT current_schema()").fetchone()[0].replace('"', '""') + '"'
    db.execute_sql(_PG_FUNCTION.format(schema=schema, name=TRIGGER_NAME))
    db.execute_sql(f'DROP TRIGGER IF EXISTS {TRIGGER_NAME} ON {schema}."session_messages"')
    db.execute_sql(
        f'CREATE TRIGGER {TRIGGER_NAME} AFTER INSERT ON {schema}."session_messages" FOR EACH ROW '
        f"WHEN (NEW.opens_turn) EXECUTE FUNCTION {schema}.{TRIGGER_NAME}()")
