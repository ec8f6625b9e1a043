"""Issue 39 item 3: a bearer token on every request, compared by its hash; ``read``
tokens cannot change anything; every request is logged with its token's name."""

from __future__ import annotations

import json

import pytest
from loguru import logger

from corvid_actors.daemon.cli import main
from corvid_actors.db.api_tokens import TOKEN_PREFIX, token_hash
from corvid_actors.errors import ConflictError, NotFoundError
from corvid_actors.testing import StoreFault
from tests.http.test_api import error_of

pytestmark = pytest.mark.anyio

MUTATIONS = [("POST", "/api/v1/sessions", {"agent": "a", "message": "m"}),
             ("POST", "/api/v1/sessions/s/messages", {"text": "t"}),
             ("POST", "/api/v1/sessions/s/stop", {}), ("POST", "/api/v1/sessions/s/resume", {}),
             ("POST", "/api/v1/sessions/s/restart", {}), ("POST", "/api/v1/sessions/s/extend", {"minutes": 1}),
             ("POST", "/api/v1/approvals/a/approve", {}), ("POST", "/api/v1/approvals/a/deny", {}),
             ("PUT", "/api/v1/mode", {"mode": "paused"})]


async def test_no_token_a_wrong_one_or_another_scheme_is_401_on_every_api_route(stack):
    async with stack.client(token=None) as c:
        for path in ("/api/v1/sessions", "/api/v1/health", "/api/v1/events", "/api/v1/sessions/x/events"):
            assert "Authorization: Bearer" in error_of(await c.get(path), 401, "unauthorized")
        for method, path, body in MUTATIONS:
            error_of(await c.request(method, path, json=body), 401, "unauthorized")
        wrong = {"Authorization": f"Bearer {stack.read[:-1]}x"}
        assert "not valid" in error_of(await c.get("/api/v1/mode", headers=wrong), 401, "unauthorized")
        basic = {"Authorization": f"Basic {stack.read}"}
        error_of(await c.get("/api/v1/mode", headers=basic), 401, "unauthorized")
        cookie = {"Cookie": f"token={stack.operate}"}  # never read from a cookie
        error_of(await c.get("/api/v1/mode", headers=cookie), 401, "unauthorized")
        error_of(await c.get("/api/v1/mode", params={"token": stack.operate}), 401, "unauthorized")
        # the routes for probes and clients need none
        assert (await c.get("/healthz")).status_code == 200
        assert (await c.get("/openapi.json")).status_code == 200


async def test_a_read_token_reads_and_is_forbidden_every_change(stack):
    async with stack.client(token="read") as c:
        assert (await c.get("/api/v1/mode")).json() == {"mode": "normal"}
        for method, path, body in MUTATIONS:
            message = error_of(await c.request(method, path, json=body), 403, "forbidden")
            assert "'viewer'" in message and "operate" in message
        assert (await c.get("/api/v1/mode")).json() == {"mode": "normal"}  # nothing changed


async def test_a_revoked_token_stops_working_at_once_and_last_use_is_recorded(stack, sim_clock):
    async with stack.client(token="operate") as c:
        assert (await c.get("/api/v1/mode")).status_code == 200
        [ops] = [t for t in stack.tokens.list_tokens() if t["name"] == "ops"]
        assert ops["last_used_at"] is not None
        assert stack.tokens.revoke("ops", now=sim_clock.now()) is True
        error_of(await c.get("/api/v1/mode"), 401, "unauthorized")
        assert stack.tokens.revoke("ops", now=sim_clock.now()) is False


async def test_while_the_store_is_down_the_tokens_last_read_still_work(stack):
    async with stack.client(token="read") as c:
        assert (await c.get("/api/v1/mode")).status_code == 200
        with StoreFault(stack.runtime, "active", times=None) as fault:
            assert (await c.get("/api/v1/mode")).status_code == 200
            error_of(await c.get("/api/v1/mode", headers={"Authorization": "Bearer corvid_nope"}), 401,
                     "unauthorized")
            assert fault.raised >= 2


async def test_every_request_is_logged_with_its_tokens_name(stack):
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO", format="{message}")
    logger.enable("corvid_actors")
    try:
        async with stack.client(token="read") as c:
            await c.get("/api/v1/mode")
            await c.post("/api/v1/sessions/x/stop")
        async with stack.client(token=None) as c:
            await c.get("/api/v1/mode")
    finally:
        logger.disable("corvid_actors")
        logger.remove(sink)
    assert any("GET /api/v1/mode 200 (token viewer)" in line for line in lines), lines
    assert any("POST /api/v1/sessions/x/stop 403 (token viewer)" in line for line in lines), lines
    assert any("GET /api/v1/mode 401 (token none)" in line for line in lines), lines


def test_tokens_are_stored_hashed_named_once_and_revoked_by_name(stack, sim_clock):
    secret = stack.tokens.create("ci", "operate", now=sim_clock.now())
    assert secret.startswith(TOKEN_PREFIX) and len(secret) > 40
    T = stack.runtime.internals.store.m.ApiToken
    row = T.get(T.name == "ci")
    assert row.token_hash == token_hash(secret) and secret not in (row.token_hash, row.name)
    with pytest.raises(ConflictError):
        stack.tokens.create("ci", "read", now=sim_clock.now())
    with pytest.raises(ValueError, match="scope"):
        stack.tokens.create("other", "admin", now=sim_clock.now())
    with pytest.raises(NotFoundError):
        stack.tokens.revoke("nobody", now=sim_clock.now())
    assert [t.name for t in stack.tokens.active()] == ["viewer", "ops", "ci"]


def test_the_token_commands_create_list_and_revoke_in_the_data_directory(tmp_path, capsys):
    data = str(tmp_path / "data")
    assert main(["admin", "token", "create", "--name", "ops", "--scope", "operate", "--data-dir", data]) == 0
    secret = capsys.readouterr().out.strip().splitlines()[-1]
    assert secret.startswith(TOKEN_PREFIX)
    assert main(["admin", "token", "list", "--data-dir", data]) == 0
    listing = capsys.readouterr().out
    assert "ops" in listing and "operate" in listing and secret not in listing
    assert main(["admin", "token", "revoke", "ops", "--data-dir", data]) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["admin", "token", "list", "--data-dir", data, "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["name"] == "ops" and row["revoked_at"] is not None
    assert main(["admin", "token", "create", "--name", "ops", "--data-dir", data]) == 1  # names are not reused
    assert "exists already" in capsys.readouterr().err


def test_the_cli_offers_the_scopes_the_store_accepts():
    from corvid_actors.daemon.token_cli import SCOPES
    from corvid_actors.db.api_tokens import TOKEN_SCOPES

    assert SCOPES == TOKEN_SCOPES


def test_a_version_16_database_gets_the_token_table_and_the_session_page_indexes(tmp_path):
    import peewee as pw

    from corvid_actors.db import migrations
    from corvid_actors.db.store import Store

    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    old.create_session(name="kept")
    old.db.execute_sql("DROP TABLE api_tokens")
    for index in ("sessions_updated_at_id", "sessions_status_updated_at_id", "sessions_agent_id_updated_at_id",
                  "sessions_source_updated_at_id"):
        old.db.execute_sql(f"DROP INDEX {index}")
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 17).execute()
    old.close()
    store = Store(url)
    try:
        assert store.schema_version == len(migrations.MIGRATIONS)
        assert [row.name for row in store.list_sessions()] == ["kept"]
        from corvid_actors.db.api_tokens import ApiTokenStore

        ApiTokenStore(store).create("new", "read")
        S = store.m.Session
        page = (S.select().where(S.status == "idle").where(pw.Tuple(S.updated_at, S.id) < pw.Tuple("9999", "z"))
                .order_by(S.updated_at.desc(), S.id.desc()).limit(10))
        sql, params = page.sql()
        plan = " ".join(str(row) for row in store.db.execute_sql("EXPLAIN QUERY PLAN " + sql, params).fetchall())
        assert "sessions_status_updated_at_id" in plan and "TEMP B-TREE" not in plan  # no scan, no sort
        migrations._api_tokens_and_session_pages(store.m, store.db)  # again: nothing changes
    finally:
        store.close()
