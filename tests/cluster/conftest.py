"""PostgreSQL fixtures for the cluster tests: the store tests' (a database per run, a fresh
schema per test; skipped locally when the server is unreachable, FAILED in CI)."""

from tests.db.conftest import open_store, pg_database_url, pg_url  # noqa: F401 - fixtures
