"""The HTTP API in cluster mode (issue 39): two real daemons (``serve`` subprocesses) on one
PostgreSQL, each with its own HTTP listener and the cluster's API tokens (one table, shared).
Any daemon answers for any session, forwarding as its admin socket does: a session one
daemon owns is read, sent to, streamed and stopped through the other's HTTP API.
``/readyz`` is ready on each only with the store reachable and the daemon registered
(its cluster lease valid: a simulated-time test cuts a daemon off).

What one daemon's event stream shows of another's session: what the cluster's event bus
brought it since its listener started (its ring), then live; the ids are the listener's
own, so a ``Last-Event-ID`` is resumable on the daemon that gave it, a gap on any other.

Timings: heartbeat 0.2 s, lease 1 s; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from corvid_actors.daemon.http_listener import build_gateway
from corvid_actors.db.api_tokens import ApiTokenStore
from corvid_actors.db.store import Store
from corvid_actors.http import create_app
from tests.cluster.conftest import sim_pair, wait_for
from tests.cluster.test_daemon_processes import (
    CLUSTER_CONFIG,
    FAST_CHUNK_DELAY_S,
    launch_daemon,
    owners,
)
from tests.e2e.test_daemon import WAIT_S, Daemon
from tests.http.test_sse import Sse

pytestmark = pytest.mark.postgres

HTTP_CONFIG = CLUSTER_CONFIG + """
[http]
listen = "127.0.0.1:0"
"""


class Api:
    """One daemon's HTTP API, with an API token."""

    def __init__(self, daemon: Daemon, token: str) -> None:
        line = daemon.wait_log("HTTP API listening at")
        found = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert found, line
        self.url = found.group(0)
        self.headers = {"Authorization": f"Bearer {token}"}

    def call(self, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        r = httpx.request(method, self.url + path, headers=self.headers, timeout=WAIT_S, **kwargs)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        return r.json()

    @contextmanager
    def stream(self, path: str, **headers: str) -> Iterator[Sse]:
        with httpx.Client(timeout=WAIT_S) as client:
            with client.stream("GET", self.url + path, headers={**self.headers, **headers}) as response:
                assert response.status_code == 200, response.read()
                yield Sse(response)


@pytest.fixture
def pair(pg_url: str, tmp_path: Path) -> Iterator[tuple[Api, Api]]:
    made = [launch_daemon(name, pg_url, tmp_path, HTTP_CONFIG, chunk_delay_s=FAST_CHUNK_DELAY_S)
            for name in ("a", "b")]
    try:
        for daemon in made:
            daemon.ready()
        store = Store(pg_url)  # the daemons migrated it; one token serves the whole cluster
        try:
            token = ApiTokenStore(store).create("ops", "operate")
        finally:
            store.close()
        yield Api(made[0], token), Api(made[1], token)
    finally:
        for daemon in made:
            daemon.kill()


def of(sse: Sse, sid: str, kind: str) -> list[dict[str, Any]]:
    """The stream's blocks up to and including ``sid``'s first event of type ``kind``."""
    return sse.until(lambda block: block.get("data", {}).get("session_id") == sid
                     and block["data"]["event"]["type"] == kind)


def test_any_daemon_answers_over_http_for_a_session_another_owns(pair, pg_url):
    apis = dict(zip("ab", pair, strict=True))
    for name, api in apis.items():  # registered, store reachable: ready
        assert api.call("GET", "/readyz") == {"ready": True, "store": None, "cluster": None}, name

    sid = apis["a"].call("POST", "/api/v1/sessions", json={"agent": "helper", "message": "hello", "create": True,
                                                            "kind": "chat"})["session"]
    # placed on the least-loaded daemon (a tie: the smaller id); the other one answers below
    name = wait_for(lambda: owners(pg_url).get(sid), "the session has an owner")
    owner, other = apis[name], apis["b" if name == "a" else "a"]

    # the other daemon reads it: forwarded to the owner, which knows its live facts
    def answered() -> dict[str, Any] | None:
        detail = other.call("GET", f"/api/v1/sessions/{sid}", params={"messages": 10})
        return detail if any(m["role"] == "assistant" for m in detail["messages"]) else None

    detail = wait_for(answered, "the first reply, read through the other daemon")
    assert detail["id"] == sid and detail["owner"] == name
    assert [m["content"] for m in detail["messages"] if m["role"] == "user"] == ["hello"]

    # the other's event stream carries the owner's events (the cluster's event bus into its
    # listener): the first turn is in its backlog, the second streams live
    with other.stream(f"/api/v1/sessions/{sid}/events") as sse:
        assert sse.next() == {"comment": "corvid-actors events"}
        backlog = of(sse, sid, "result")
        assert {blk["data"]["event"]["type"] for blk in backlog} >= {"session_started", "result"}
        # a send through the other is acknowledged once committed, and delivered by the owner
        sent = other.call("POST", f"/api/v1/sessions/{sid}/messages", json={"text": "again"})
        assert sent["session"] == sid and sent["owner"] == name and sent["delivered"] is True
        live = of(sse, sid, "result")
        streamed = "".join(blk["data"]["event"].get("text", "") for blk in live
                           if blk["data"]["event"]["type"] == "content_block_delta")
        # the owner's stub streamed it (its words say whose)
        assert streamed.startswith(f"{name}word0 ") and f"{name}word99" in streamed
        assert all(blk["data"]["session_id"] == sid for blk in live if "data" in blk)

        # stopped through the other: the owner stops it, and the stop reaches the stream
        other.call("POST", f"/api/v1/sessions/{sid}/stop")
        assert of(sse, sid, "session_stopped")[-1]["data"]["event"]["type"] == "session_stopped"

    wait_for(lambda: owners(pg_url).get(sid) is None, "the stop ended the owner's lease")
    stored = owner.call("GET", f"/api/v1/sessions/{sid}", params={"messages": 10})
    assert stored["status"] == "stopped"
    assert [m["content"] for m in stored["messages"] if m["role"] == "user"] == ["hello", "again"]
    # the other's copy of the stream is resumable with Last-Event-ID, as a local one is
    with other.stream("/api/v1/events", **{"Last-Event-ID": live[0]["id"]}) as sse:
        assert sse.next() == {"comment": "corvid-actors events"}
        assert of(sse, sid, "session_stopped")[0]["id"] == live[1]["id"]
    # ... but an event id is its listener's own: given to another daemon, it is a gap (the
    # client lost track and reloads the history), then that daemon's whole ring
    with owner.stream("/api/v1/events", **{"Last-Event-ID": live[0]["id"]}) as sse:
        assert sse.next() == {"comment": "corvid-actors events"}
        gap = sse.next()
        assert gap["event"] == "gap" and gap["data"] == {"missed_after": live[0]["id"]}
        assert of(sse, sid, "session_stopped")[-1]["data"]["session_id"] == sid


def readyz(runtime: Any) -> tuple[int, dict[str, Any]]:
    """``GET /readyz`` of ``runtime``'s HTTP app, as ``serve`` builds its gateway (the admin
    hooks unused: readiness asks only the store and the cluster seat)."""
    gateway = build_gateway(runtime, runtime.internals.store, runtime.internals.cluster,
                            lambda request: None, lambda session, sink: lambda: None)
    app = create_app(gateway, runtime.config.http, runtime.clock)

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            return await client.get("/readyz")

    r = asyncio.run(get())
    return r.status_code, r.json()


def test_readyz_is_ready_only_while_the_daemon_holds_a_valid_cluster_lease(pg_url):
    with sim_pair(pg_url) as sim:
        sim.clock.advance_to(6)  # registered; a heartbeat renewed the lease
        assert readyz(sim.a.runtime) == (200, {"ready": True, "store": None, "cluster": None})
        sim.proxy.partition()  # a is cut off from the database: no heartbeat renews its lease
        sim.clock.advance_to(30)  # past lease_s (15 s) since the last renewal
        status, body = readyz(sim.a.runtime)
        assert status == 503 and body["ready"] is False
        assert "daemon a has no valid lease" in body["cluster"] and body["store"] is not None
        assert readyz(sim.b.runtime) == (200, {"ready": True, "store": None, "cluster": None})
        sim.proxy.admit()
        sim.clock.advance_to(45)  # heartbeats again: registered anew (or renewed)
        assert readyz(sim.a.runtime) == (200, {"ready": True, "store": None, "cluster": None})
