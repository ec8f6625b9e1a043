"""No statement of a running bot or of a cluster reads a whole growing table (PostgreSQL).

The scenario of ``tests/plans/scenario.py`` (a chat bot with credits and a simulated day,
then three daemons claiming, renewing, sweeping, draining and finishing leases) runs on a
real PostgreSQL; every statement is then planned with sequential scans disabled
(``enable_seqscan = off``): PostgreSQL still plans one only where no index can serve the
statement, so a ``Seq Scan`` of a growing table left in a plan is a read of every row —
every session the bot or the cluster ever had — each time it runs. (The planner's choice
on a small test table proves nothing; this asks whether an index exists for it.)
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from corvid_actors.db.store import Store
from tests.plans.scenario import GROWING, Statements, bot_day, cluster_day

pytestmark = pytest.mark.postgres


def seq_scans(store: Store, statements: Statements) -> list[tuple[str, str]]:
    found = []
    with store.transaction():
        store.db.execute_sql("SET LOCAL enable_seqscan = off")
        for sql, params in sorted(statements.items()):
            if not re.match(r"\s*(WITH|SELECT|UPDATE|DELETE|INSERT)", sql, re.IGNORECASE):
                continue
            [[plan]] = store.db.execute_sql("EXPLAIN (FORMAT JSON) " + sql, params).fetchall()
            plan = json.loads(plan) if isinstance(plan, str) else plan
            found += [(table, sql) for table in _seq_scanned(plan[0]["Plan"]) if table in GROWING]
    return found


def _seq_scanned(node: dict[str, Any]) -> list[str]:
    """The relations a plan reads with a sequential scan."""
    here = [node["Relation Name"]] if node.get("Node Type") == "Seq Scan" else []
    return here + [table for child in node.get("Plans", ()) for table in _seq_scanned(child)]


def test_a_chat_bot_and_a_cluster_read_no_growing_table_whole(pg_url: str) -> None:
    def plan(store: Store, statements: Statements) -> tuple[int, list[tuple[str, str]]]:
        cluster_day(store, statements)
        return len(statements), seq_scans(store, statements)

    count, scans = bot_day(pg_url, plan=plan)
    assert count > 30
    assert scans == [], "\n".join(f"Seq Scan on {table}: {sql}" for table, sql in scans)
