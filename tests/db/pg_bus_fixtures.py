"""A helper of the bus tests (test_pg_bus.py, test_pg_bus_purge.py; their fixtures
``bus_url`` and ``admin`` are in conftest.py): run SQL on a plain connection."""

from __future__ import annotations

from typing import Any


def sql(conn: Any, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(statement, params)
        return list(cur.fetchall()) if cur.description else []
