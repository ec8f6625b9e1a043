"""The migrations' contract for rolling upgrades (issue 20; corvid_actors/db/migrations.py):
every migration not marked ``breaking`` only adds — tables, nullable or defaulted columns,
indexes (unique ones only on new tables), triggers — so the previous release keeps running
on the schema it makes.

Two checks, since neither alone sees everything: the text of each migration (and of the
helpers it calls) holds no destructive statement, including one that runs only on an old
database; and, on a real PostgreSQL, applying each migration to a database at the version
before it removes or changes nothing in the catalog.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from types import FunctionType
from typing import Any

import pytest

from corvid_actors.db.migrations import MIGRATIONS, Migration, is_breaking
from corvid_actors.db.store import Store

#: statements (and peewee migrator calls) that remove, rename or tighten what exists
DESTRUCTIVE = [re.compile(p, re.IGNORECASE) for p in (
    r"\bDROP\s+(TABLE|COLUMN|INDEX|VIEW|SCHEMA|CONSTRAINT|DEFAULT|TYPE)\b",
    r"\bRENAME\b",
    r"\bALTER\s+COLUMN\b",
    r"\bSET\s+NOT\s+NULL\b",
    r"\bADD\s+(CONSTRAINT|PRIMARY|FOREIGN|UNIQUE|CHECK)\b",
    r"\bCREATE\s+UNIQUE\s+INDEX\b",
    r"(?<!IS )\bNOT\s+NULL\b(?!\s+DEFAULT)",  # a column without a default (not "IS NOT NULL")
    r"\b(TRUNCATE|DELETE\s+FROM)\b",
    r"\b(drop_table|drop_column|rename_column|rename_table|add_not_null|alter_column_type|drop_index)\s*\(",
)]


def destructive(text: str) -> list[str]:
    """The destructive statements in ``text`` (comments left out)."""
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    return [m.group(0) for pattern in DESTRUCTIVE for m in pattern.finditer(code)]


def sources(fn: Callable[..., Any], depth: int = 2) -> Iterator[str]:
    """``fn``'s source and that of the functions (of our package) it names, ``depth`` deep."""
    yield inspect.getsource(fn)
    if depth == 0:
        return
    for name in fn.__code__.co_names:
        called = fn.__globals__.get(name)
        if isinstance(called, FunctionType) and called.__module__.startswith("corvid_actors"):
            yield from sources(called, depth - 1)


@pytest.mark.parametrize(("statement", "flagged"), [
    ("CREATE TABLE IF NOT EXISTS notes (id BIGSERIAL PRIMARY KEY, body TEXT)", False),
    ("ALTER TABLE sessions ADD COLUMN open_turns INTEGER NOT NULL DEFAULT 0", False),
    ("ALTER TABLE sessions ADD COLUMN writer_epoch BIGINT", False),
    ("CREATE INDEX IF NOT EXISTS x ON t (a)", False),
    ("DROP TRIGGER IF EXISTS corvid_fence ON t", False),  # re-installed at once: nothing lost
    ("WHEN (NEW.writer_epoch IS NOT NULL)", False),
    ("ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL", True),
    ("ALTER TABLE sessions DROP COLUMN name", True),
    ("ALTER TABLE sessions RENAME COLUMN name TO title", True),
    ("ALTER TABLE sessions ALTER COLUMN name TYPE varchar(20)", True),
    ("CREATE UNIQUE INDEX one_name ON sessions (name)", True),
    ("migrator.drop_column('sessions', 'name')", True),
    ("DROP TABLE webhook_replays", True),
])
def test_the_scan_tells_what_removes_or_tightens(statement: str, flagged: bool) -> None:
    assert bool(destructive(statement)) == flagged


@pytest.mark.parametrize("migration", MIGRATIONS[1:], ids=lambda m: m.__name__)
def test_every_migration_after_the_baseline_only_adds_or_is_marked_breaking(migration: Migration) -> None:
    if is_breaking(migration):
        pytest.skip("marked breaking: the previous release refuses the database it makes")
    found = [hit for text in sources(migration) for hit in destructive(text)]
    assert not found, (f"migration {migration.__name__} runs {found}: the previous release could not run "
                       "on its schema; make it additive, or mark it @breaking (every daemon must then be "
                       "upgraded before it starts again: README 'Running several daemons')")


# --- on PostgreSQL: the catalog before and after each migration ---------------------------------

def catalog(store: Store) -> dict[str, Any]:
    def rows(sql: str) -> set[tuple[Any, ...]]:
        return set(store.db.execute_sql(sql).fetchall())

    here = "table_schema = current_schema()"
    return {
        "tables": rows(f"SELECT table_name FROM information_schema.tables WHERE {here}"),
        "columns": rows("SELECT table_name, column_name, data_type, is_nullable, column_default "
                        f"FROM information_schema.columns WHERE {here}"),
        "indexes": rows("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"),
        "triggers": rows("SELECT event_object_table, trigger_name, event_manipulation FROM "
                         "information_schema.triggers WHERE trigger_schema = current_schema()"),
    }


@pytest.mark.postgres
def test_each_migration_applied_to_the_version_before_it_removes_or_changes_nothing(pg_url: str) -> None:
    store = Store(pg_url, migrations=MIGRATIONS[:1])
    before = catalog(store)
    store.close()
    for number in range(2, len(MIGRATIONS) + 1):
        store = Store(pg_url, migrations=MIGRATIONS[:number])
        try:
            assert store.schema_version == number
            after = catalog(store)
        finally:
            store.close()
        if not is_breaking(MIGRATIONS[number - 1]):
            name = f"migration {number} ({MIGRATIONS[number - 1].__name__})"
            for part in ("tables", "columns", "indexes", "triggers"):
                assert before[part] <= after[part], f"{name} removed or changed {part}: {before[part] - after[part]}"
            old_tables = {t for (t,) in before["tables"]}
            for table, column, _type, nullable, default in after["columns"] - before["columns"]:
                assert table not in old_tables or nullable == "YES" or default is not None, (
                    f"{name} added {table}.{column} NOT NULL without a default: the previous release's inserts fail")
            for table, index, definition in after["indexes"] - before["indexes"]:
                assert table not in old_tables or "UNIQUE" not in definition, (
                    f"{name} added the unique index {index} to {table}: the previous release's writes may fail")
        before = after
