"""No statement of a running bot reads a whole table that grows with its users (SQLite).

A chat bot with credits and a simulated day of sessions (resumes, crashes, outages,
inactivity stops; ``tests/plans/scenario.py``) runs while every statement is recorded;
each one is then planned (``EXPLAIN QUERY PLAN``). A ``SCAN`` of a growing table (a read
of every row, as the chat bridge's conversation lookup was) fails the test with the
statement: a bot with a million conversations would pay for all of them on every such
call. A plan cannot show a range of an index that is walked too far (the resume's
exit-notes read was one: tests/db/test_history_reads.py measures it). PostgreSQL's plans,
with the cluster's statements: tests/db/test_query_plans_pg.py.
"""

from __future__ import annotations

import re

from tests.plans.scenario import GROWING, Statements, bot_day


def full_scans(store, statements: Statements) -> list[tuple[str, str]]:
    conn = store.db.connection()
    found = []
    for sql, params in sorted(statements.items()):
        if not re.match(r"\s*(SELECT|UPDATE|DELETE|INSERT)", sql, re.IGNORECASE) or "sqlite_master" in sql:
            continue
        for *_, detail in conn.execute("EXPLAIN QUERY PLAN " + sql, params or ()).fetchall():
            # "SCAN sessions", "SCAN t1" (an alias): the table behind an alias is named in the SQL
            m = re.match(r"SCAN (\w+)(?: USING (COVERING )?INDEX \w+)?$", detail)
            if m is None:
                continue
            alias = m.group(1)
            table = alias if alias in GROWING else next(
                (t for t in GROWING if re.search(rf'"{t}" AS "{alias}"', sql)), None)
            if table is not None:
                found.append((detail, sql))
    return found


def test_a_chat_bot_and_a_simulated_day_read_no_growing_table_whole() -> None:
    statements, scans = bot_day(plan=lambda store, statements: (dict(statements), full_scans(store, statements)))
    assert len(statements) > 10
    assert scans == [], "\n".join(f"{detail}: {sql}" for detail, sql in scans)
