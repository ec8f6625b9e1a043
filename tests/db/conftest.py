"""Store fixtures: SQLite in memory, SQLite WAL file, and PostgreSQL.

PostgreSQL runs at ``CORVID_TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``).
Each test run creates its own database (unique name) from that server and drops it at the
end; each test gets a fresh schema inside it, selected through the URL's ``search_path``
option, so runs and tests never collide. Tests that need PostgreSQL are marked
``postgres``: they skip when the server is unreachable on a developer machine, and FAIL
when it is unreachable in CI (``CI=true``), where the server is part of the job.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from corvid_actors.db.store import Store

#: every join is bounded: a deadlock is a failure, not a hung run
JOIN_TIMEOUT_S = 60
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
#: connecting to a reachable local server takes milliseconds; a dead one is refused at once
PG_CONNECT_TIMEOUT_S = 3


def pg_base_url() -> str:
    return os.environ.get("CORVID_TEST_PG_URL") or DEFAULT_PG_URL


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


def _admin_connect(url: str) -> Any:
    """A psycopg2 connection in autocommit mode."""
    import psycopg2

    conn = psycopg2.connect(url, connect_timeout=PG_CONNECT_TIMEOUT_S)
    conn.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
    return conn


def admin_connect_or_skip(base: str) -> Any:
    """An admin connection to the test server. Unreachable: skip locally, FAIL in CI.

    The one place that decides what an unreachable PostgreSQL means for a test run.
    """
    try:
        return _admin_connect(base)
    except Exception as exc:  # psycopg2.OperationalError, or psycopg2 missing
        message = (
            f"PostgreSQL unreachable at {base} ({exc.__class__.__name__}: {exc}). "
            "Set CORVID_TEST_PG_URL to a reachable server. Locally this skips; "
            "in CI (CI=true) an unreachable PostgreSQL FAILS the postgres tests."
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """URL of a database created for this test run (dropped afterwards)."""
    base = pg_base_url()
    admin = admin_connect_or_skip(base)
    name = f"corvid_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(base, name)
    finally:
        with admin.cursor() as cur:
            # FORCE: a store a failing test left open must not keep the database alive.
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _schema_url(database_url: str, schema: str) -> str:
    sep = "&" if urlsplit(database_url).query else "?"
    # synchronous_commit=off: a test database need not survive a power cut, and without
    # it every commit waits for an fsync (seconds over a test run). search_path comes last.
    return f"{database_url}{sep}options=-csynchronous_commit%3Doff%20-csearch_path%3D{schema}"


def _create_schema(database_url: str) -> str:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = _admin_connect(database_url)
    with admin.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{schema}"')
    admin.close()
    return schema


@pytest.fixture
def pg_url(pg_database_url: str) -> Iterator[str]:
    """A fresh, empty schema of the run's database, as a store URL (search_path option)."""
    schema = _create_schema(pg_database_url)
    try:
        yield _schema_url(pg_database_url, schema)
    finally:
        admin = _admin_connect(pg_database_url)
        with admin.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()


@pytest.fixture(scope="session")
def pg_shared_url(pg_database_url: str) -> str:
    """One schema for the parametrized store tests; emptied after each test.

    Creating and migrating a schema per test costs ~0.2 s; emptying it costs milliseconds.
    Tests about migrations use :func:`pg_url` (a fresh schema) instead.
    """
    return _schema_url(pg_database_url, _create_schema(pg_database_url))


def _empty_all_tables(store: Store) -> None:
    # DELETE in reverse dependency order: on tables this small it is much faster than
    # TRUNCATE, which replaces every table's files.
    with store.transaction():
        for model in reversed(store.m.all):
            if model is not store.m.SchemaVersion:
                model.delete().execute()


@pytest.fixture
def open_store() -> Iterator[Callable[[str], Store]]:
    """Opens stores and closes every one of them after the test."""
    opened: list[Store] = []

    def _open(url: str) -> Store:
        store = Store(url)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


BACKENDS = [
    "sqlite-memory",
    "sqlite-file",
    pytest.param("postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, open_store: Callable[[str], Store], tmp_path) -> Iterator[Store]:
    """A migrated, empty store on each backend."""
    if request.param == "sqlite-memory":
        yield open_store("sqlite:///:memory:")
    elif request.param == "sqlite-file":
        yield open_store(f"sqlite:///{tmp_path / 'corvid.db'}")
    else:
        store = open_store(request.getfixturevalue("pg_shared_url"))
        yield store
        _empty_all_tables(store)


def run_together(targets: list[Callable[[], None]]) -> list[BaseException]:
    """Start every target at the same instant (barrier); return what they raised."""
    barrier = threading.Barrier(len(targets), timeout=JOIN_TIMEOUT_S)
    errors: list[BaseException] = []

    def wrap(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            barrier.wait()
            try:
                target()
            except BaseException as exc:
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
        assert not thread.is_alive(), "a store call is stuck"
    return errors


@pytest.fixture
def bus_url(pg_url: str) -> str:
    """A PostgreSQL schema migrated for the bus (cluster_commands, cluster_events, their indexes)."""
    Store(pg_url).close()
    return pg_url


@pytest.fixture
def admin(bus_url: str) -> Iterator[Any]:
    """A plain autocommit connection to ``bus_url``, to look at the bus's tables."""
    import psycopg2  # optional: only the bus tests, which skip without it, ask for this

    conn = psycopg2.connect(bus_url)
    conn.autocommit = True
    yield conn
    conn.close()
