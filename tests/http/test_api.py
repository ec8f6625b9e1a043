"""The JSON API over the ASGI app (httpx's ASGITransport): every route runs its admin
command through the protocol's validator and the AdminActor, and answers its errors as
``{"error": {"code", "message"}}`` with the status of the code."""

from __future__ import annotations

import pytest

from tests.http.conftest import running_stack

pytestmark = pytest.mark.anyio


def error_of(response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["error"]["code"] == code, body
    return body["error"]["message"]


async def start(client, agent="helper", message="hello", **more) -> str:
    r = await client.post("/api/v1/sessions", json={"agent": agent, "message": message, "create": True, **more})
    assert r.status_code == 200, r.text
    return r.json()["session"]


async def test_a_session_is_started_listed_shown_and_its_history_read(stack, scripted):
    scripted.reply("Hi there.")
    async with stack.client() as c:
        sid = await start(c, name="first")
        stack.runtime.settle()
        listed = (await c.get("/api/v1/sessions")).json()
        [row] = listed["sessions"]
        assert listed["next_cursor"] is None
        assert (row["id"], row["agent"], row["source"], row["name"]) == (sid, "helper", "web", "first")
        assert row["turns"] == 1 and row["owner"] is None and row["last_activity"].endswith("Z")
        detail = (await c.get(f"/api/v1/sessions/{sid}", params={"messages": 5})).json()
        assert detail["id"] == sid
        assert [m["content"] for m in detail["messages"]] == ["hello", "Hi there."]
        history = (await c.get(f"/api/v1/sessions/{sid}/history", params={"tail": 10})).json()
        texts = [e["event"].get("text") for e in history["events"] if e["event"]["type"] == "message"]
        assert history["session"] == sid and texts[:1] == ["hello"]
        prefix = (await c.get(f"/api/v1/sessions/{sid[:8]}")).json()  # a unique prefix, as on the CLI
        assert prefix["id"] == sid


async def test_send_stop_resume_restart_and_extend(stack, scripted):
    scripted.reply("one")
    scripted.reply("two")
    async with stack.client() as c:
        sid = await start(c)
        stack.runtime.settle()
        r = await c.post(f"/api/v1/sessions/{sid}/messages", json={"text": "again"})
        assert r.status_code == 200 and r.json()["delivered"] is True
        stack.runtime.settle()
        r = await c.post(f"/api/v1/sessions/{sid}/extend", json={"minutes": 5})
        assert r.status_code == 200, r.text
        r = await c.post(f"/api/v1/sessions/{sid}/stop")  # no body at all
        assert r.status_code == 200 and r.json()["session"] == sid
        stack.runtime.settle()
        assert (await c.get(f"/api/v1/sessions/{sid}")).json()["status"] != "running"
        r = await c.post(f"/api/v1/sessions/{sid}/resume", json={})
        assert r.status_code == 200, r.text
        stack.runtime.settle()
        r = await c.post(f"/api/v1/sessions/{sid}/restart", json={})
        assert r.status_code == 200, r.text
        users = [m["content"] for m in (await c.get(f"/api/v1/sessions/{sid}", params={"messages": 20})).json()[
            "messages"] if m["role"] == "user"]
        assert users == ["hello", "again"]


async def test_approvals_are_listed_approved_and_denied(sim_clock, scripted, tmp_path):
    with running_stack(sim_clock, scripted, tmp_path, direct=True) as stack:
        scripted.tool_call("list_files", {"path": "."})
        scripted.reply("Done.")
        scripted.tool_call("list_files", {"path": "."})
        scripted.reply("Not done.")
        async with stack.client() as c:
            sid = await start(c, agent="careful", message="list files")
            stack.runtime.settle()
            [pending] = (await c.get("/api/v1/approvals")).json()
            assert (pending["session_id"], pending["tool_name"]) == (sid, "list_files")
            assert (await c.get("/api/v1/approvals", params={"session": sid})).json() == [pending]
            r = await c.post(f"/api/v1/approvals/{pending['id']}/approve", json={"message": "ok"})
            assert r.status_code == 200 and r.json()["behavior"] == "allow"
            assert r.json()["answered_by"] == "http:ops"  # the operate token's name answered
            error_of(await c.post(f"/api/v1/approvals/{pending['id']}/deny"), 404, "not_found")
            stack.runtime.settle()
            assert (await c.get("/api/v1/approvals")).json() == []
            await c.post(f"/api/v1/sessions/{sid}/messages", json={"text": "once more"})
            stack.runtime.settle()
            [second] = (await c.get("/api/v1/approvals")).json()
            r = await c.post(f"/api/v1/approvals/{second['id']}/deny", json={"message": "no"})
            assert r.status_code == 200, r.text
            stack.runtime.settle()
            assert (await c.get("/api/v1/approvals")).json() == []


async def test_mode_credits_health_stats_and_agents(sim_clock, scripted, tmp_path):
    with running_stack(sim_clock, scripted, tmp_path, credits=True) as stack:
        async with stack.client() as c:
            assert (await c.get("/api/v1/mode")).json() == {"mode": "normal"}
            assert (await c.put("/api/v1/mode", json={"mode": "paused"})).json() == {"mode": "paused"}
            assert (await c.get("/api/v1/mode")).json() == {"mode": "paused"}
            error_of(await c.put("/api/v1/mode", json={"mode": "sideways"}), 400, "bad_request")
            balance = (await c.get("/api/v1/credits", params={"participant": "bob", "transactions": 3})).json()
            assert balance["balance"] == 0
            assert "participant" in error_of(await c.get("/api/v1/credits"), 400, "bad_request")
            health = (await c.get("/api/v1/health")).json()
            assert health["status"] == "ok" and health["store"] == {"ok": True}
            stats = (await c.get("/api/v1/stats")).json()
            assert isinstance(stats, dict) and stats
            await start(c)
            agents = (await c.get("/api/v1/agents")).json()
            assert [a["name"] for a in agents] == ["helper"]


async def test_the_validator_answers_bad_requests_with_its_reasons(stack):
    async with stack.client() as c:
        error_of(await c.post("/api/v1/sessions", content=b"{not json"), 400, "bad_request")
        error_of(await c.post("/api/v1/sessions", content=b"[1, 2]"), 400, "bad_request")
        error_of(await c.post("/api/v1/sessions", content=b'{"agent": NaN}'), 400, "bad_request")
        error_of(await c.post("/api/v1/sessions", content=b"\xff\xfe"), 400, "bad_request")
        message = error_of(await c.post("/api/v1/sessions", json={"agent": "a"}), 400, "bad_request")
        assert "'prompt' is required" in message
        message = error_of(await c.post("/api/v1/sessions", json={"agent": "a", "message": "m", "colour": 1}),
                           400, "bad_request")
        assert "unknown argument(s) colour" in message
        message = error_of(await c.post("/api/v1/sessions", json={"agent": 7, "message": "m"}), 400, "bad_request")
        assert "'agent' must be a string" in message
        lone = error_of(await c.post("/api/v1/sessions/x/messages", content=b'{"text": "\\ud800"}'), 400, "bad_request")
        assert "lone surrogates" in lone
        assert "must be an integer" in error_of(await c.get("/api/v1/sessions", params={"limit": "ten"}),
                                                400, "bad_request")
        assert "at most 1000" in error_of(await c.get("/api/v1/sessions", params={"limit": 5000}), 400, "bad_request")
        assert "status" in error_of(await c.get("/api/v1/sessions", params={"status": "dancing"}),
                                    400, "bad_request")
        assert "unknown argument(s) sort" in error_of(await c.get("/api/v1/sessions", params={"sort": "x"}),
                                                      400, "bad_request")
        assert "cursor" in error_of(await c.get("/api/v1/sessions", params={"cursor": "garbage!"}),
                                    400, "bad_request")
        error_of(await c.get("/api/v1/sessions/no-such-session"), 404, "not_found")
        error_of(await c.post("/api/v1/sessions/no-such-session/stop"), 404, "not_found")
        error_of(await c.get("/api/v1/sessions/no-such-session/events"), 404, "not_found")
        error_of(await c.post("/api/v1/sessions/no-such-session/extend", json={"minutes": -1}), 400, "bad_request")
        error_of(await c.get("/api/v1/nowhere"), 404, "not_found")
        assert (await c.delete("/api/v1/sessions")).status_code == 405


async def test_a_body_over_the_limit_is_too_large_and_nothing_is_started(stack):
    async with stack.client(max_body_bytes=1000) as c:
        big = {"agent": "helper", "message": "x" * 2000, "create": True}
        error_of(await c.post("/api/v1/sessions", json=big), 413, "too_large")

        async def chunks():  # no Content-Length: counted as it arrives
            for _ in range(5):
                yield b"x" * 400

        error_of(await c.post("/api/v1/sessions", content=chunks()), 413, "too_large")
        assert (await c.get("/api/v1/sessions")).json()["sessions"] == []


async def test_sessions_are_filtered_searched_and_paged_with_a_cursor(stack, sim_clock):
    store = stack.runtime.internals.store
    async with stack.client() as c:
        ids = []
        for i in range(7):
            sid = store.create_session(source="chat" if i % 2 else "web", name=f"job {i}",
                                       participant="alice" if i == 3 else "").id
            ids.append(sid)
            sim_clock.advance(1)
            store.update_session(sid, status="idle")  # a newer updated_at for each
        newest_first = list(reversed(ids))
        seen, cursor = [], None
        while True:
            params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
            page = (await c.get("/api/v1/sessions", params=params)).json()
            assert len(page["sessions"]) <= 3
            seen += [s["id"] for s in page["sessions"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == newest_first  # every session once, in order, across the pages
        chat = (await c.get("/api/v1/sessions", params={"source": "chat"})).json()["sessions"]
        assert [s["id"] for s in chat] == [ids[5], ids[3], ids[1]]
        found = (await c.get("/api/v1/sessions", params={"q": "alice"})).json()["sessions"]
        assert [s["id"] for s in found] == [ids[3]]
        assert (await c.get("/api/v1/sessions", params={"status": "running"})).json()["sessions"] == []
        none = (await c.get("/api/v1/sessions", params={"agent": "nobody"})).json()
        assert none == {"sessions": [], "next_cursor": None}


async def test_readyz_says_why_the_store_is_down_and_healthz_stays_up(sim_clock, scripted, tmp_path):
    path = tmp_path / "c.db"
    with running_stack(sim_clock, scripted, tmp_path, store_url=f"sqlite:///{path}") as stack:
        async with stack.client(token=None) as c:
            r = await c.get("/readyz")
            assert r.status_code == 200 and r.json() == {"ready": True, "store": None}
            path.chmod(0o444)
            try:
                r = await c.get("/readyz")
                assert r.status_code == 503, r.text
                assert r.json()["ready"] is False and r.json()["store"]
                assert (await c.get("/healthz")).json() == {"ok": True}
            finally:
                path.chmod(0o644)
            assert (await c.get("/readyz")).status_code == 200


async def test_metrics_are_served_with_a_token(stack):
    async with stack.client(token="read") as c:
        r = await c.get("/metrics")
        assert r.status_code == 200 and "corvid_session_starts_total" in r.text
        assert r.headers["content-type"].startswith("text/plain")
    async with stack.client(token=None) as c:
        error_of(await c.get("/metrics"), 401, "unauthorized")
