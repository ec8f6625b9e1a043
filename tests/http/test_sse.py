"""Server-sent events over a real uvicorn socket (127.0.0.1:0): the backlog first, then
live events, each with an ``id:``; ``Last-Event-ID`` resumes after it; a client that
falls behind is closed and resumes from the backlog; the listener's stop ends streams."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from corvid_actors.http import HttpListener
from corvid_actors.http.sse import EventHub

#: every wait on the socket is bounded by this (seconds)
WAIT_S = 5.0


@contextmanager
def listening(stack, **http: Any) -> Iterator[HttpListener]:
    config = stack.runtime.config.replace(http={"listen": "127.0.0.1:0", **http})
    listener = HttpListener(stack.gateway, config.http, stack.runtime.clock)
    listener.start()
    try:
        yield listener
    finally:
        listener.stop()


class Sse:
    """The blocks of one event stream: ``{"id", "event", "data"}`` dicts, or ``{"comment"}``."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.iter_lines()

    def next(self) -> dict[str, Any]:
        block: dict[str, Any] = {}
        for line in self.lines:
            if line == "":
                if block:
                    return block
                continue
            if line.startswith(":"):
                return {"comment": line[1:].strip()}
            name, _, value = line.partition(": ")
            block[name] = json.loads(value) if name == "data" else value
        raise EOFError("the stream ended")

    def events(self, n: int) -> list[dict[str, Any]]:
        """The next ``n`` event blocks (comments skipped)."""
        out: list[dict[str, Any]] = []
        while len(out) < n:
            block = self.next()
            if "comment" not in block:
                out.append(block)
        return out

    def until(self, predicate) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            block = self.next()
            if "comment" in block:
                continue
            out.append(block)
            if predicate(block):
                return out


@contextmanager
def stream(listener: HttpListener, path: str, token: str, **headers: str) -> Iterator[Sse]:
    with httpx.Client(timeout=WAIT_S) as client:
        with client.stream("GET", listener.url + path,
                           headers={"Authorization": f"Bearer {token}", **headers}) as response:
            assert response.status_code == 200, response.read()
            assert response.headers["content-type"].startswith("text/event-stream")
            yield Sse(response)


def api(listener: HttpListener, token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, listener.url + path, headers={"Authorization": f"Bearer {token}"},
                         timeout=WAIT_S, **kwargs)


def turn_done(block: dict[str, Any]) -> bool:
    return block.get("data", {}).get("event", {}).get("type") == "result"


def seq(block: dict[str, Any]) -> int:
    return int(block["id"].rpartition("-")[2])


def test_backlog_then_live_events_then_resume_with_last_event_id(stack, scripted):
    scripted.reply("first answer")
    scripted.reply("second answer")
    with listening(stack) as listener:
        started = api(listener, stack.operate, "POST", "/api/v1/sessions",
                      json={"agent": "helper", "message": "hello", "create": True})
        sid = started.json()["session"]
        stack.runtime.settle()
        with stream(listener, "/api/v1/events", stack.read) as sse:
            backlog = sse.until(turn_done)  # the first turn, from the backlog
            assert all(b["data"]["session_id"] == sid for b in backlog)
            api(listener, stack.operate, "POST", f"/api/v1/sessions/{sid}/messages", json={"text": "again"})
            stack.runtime.settle()
            live = sse.until(turn_done)  # the second, as it happens
        ids = [seq(b) for b in backlog + live]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)  # every event once, in order
        texts = [b["data"]["event"]["content"] for b in live if b["data"]["event"]["type"] == "assistant"]
        assert texts == ["second answer"]
        middle = backlog[len(backlog) // 2]
        with stream(listener, f"/api/v1/sessions/{sid[:8]}/events", stack.read,
                    **{"Last-Event-ID": middle["id"]}) as sse:
            resumed = sse.until(lambda b: seq(b) == ids[-1])
        assert [seq(b) for b in resumed] == [i for i in ids if i > seq(middle)]


def test_a_session_stream_has_only_its_events_and_backlog_limits_the_replay(stack, scripted):
    scripted.reply("a")
    scripted.reply("b")
    with listening(stack, sse_heartbeat_s=0.05) as listener:
        one = api(listener, stack.operate, "POST", "/api/v1/sessions",
                  json={"agent": "helper", "message": "one", "create": True}).json()["session"]
        two = api(listener, stack.operate, "POST", "/api/v1/sessions",
                  json={"agent": "helper", "message": "two"}).json()["session"]
        stack.runtime.settle()
        with stream(listener, f"/api/v1/sessions/{two}/events", stack.read) as sse:
            blocks = sse.until(turn_done)
        assert {b["data"]["session_id"] for b in blocks} == {two}
        assert one != two
        newest = listener.app.state.http.hub._seq
        with stream(listener, "/api/v1/events?backlog=1", stack.read) as sse:
            assert sse.next() == {"comment": "corvid-actors events"}
            last = sse.next()
            assert seq(last) == newest  # only the newest event of the backlog
            assert sse.next() == {"comment": "keep-alive"}  # and nothing else
        r = api(listener, stack.read, "GET", "/api/v1/sessions/nope/events")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_an_id_of_an_earlier_boot_gets_a_gap_notice_then_the_backlog(stack, scripted):
    scripted.reply("hi")
    with listening(stack) as listener:
        api(listener, stack.operate, "POST", "/api/v1/sessions", json={"agent": "h", "message": "m", "create": True})
        stack.runtime.settle()
        with stream(listener, "/api/v1/events", stack.read, **{"Last-Event-ID": "0000-42"}) as sse:
            first = sse.events(1)[0]
            assert first["event"] == "gap" and first["data"] == {"missed_after": "0000-42"}
            assert seq(sse.events(1)[0]) == 1  # then everything the listener kept


def test_an_idle_stream_gets_heartbeats_and_the_listeners_stop_ends_it(stack):
    with listening(stack, sse_heartbeat_s=0.05) as listener:
        with stream(listener, "/api/v1/events", stack.read) as sse:
            assert sse.next() == {"comment": "corvid-actors events"}
            assert sse.next() == {"comment": "keep-alive"}
            stopper = threading.Thread(target=listener.stop)
            stopper.start()
            assert sse.until(lambda b: b.get("event") == "end")[-1]["event"] == "end"
            stopper.join(WAIT_S)
            assert not stopper.is_alive()
    assert not any(t.name == "http-listener" for t in threading.enumerate())


# --- the hub's bounds, without a socket ---------------------------------------------------------


async def _drain(hub: EventHub, stream_, head: list[bytes]) -> list[bytes]:
    out = []
    async for block in hub.blocks(stream_, head, heartbeat_s=WAIT_S):
        out.append(block)
    return out


@pytest.mark.anyio
async def test_a_client_that_falls_behind_is_closed_and_resumes_from_the_backlog():
    hub = EventHub(backlog=100, queue_limit=3)
    hub.bind(asyncio.get_running_loop())
    slow, head = hub.open(None, None, None)
    for i in range(10):  # published while the client reads nothing
        hub._publish("s1", "2026-01-01T00:00:00Z", {"type": "assistant", "text": str(i)})
    got = await asyncio.wait_for(_drain(hub, slow, head), WAIT_S)
    events = [b for chunk in got for b in chunk.split(b"\n\n") if b.startswith(b"id:")]  # sent in one write
    assert len(events) == 3 and got[-1].startswith(b"event: overflow")
    assert hub.overflows == 1 and hub.streams == 0
    last_id = events[-1].split(b"\n")[0].split(b": ")[1].decode()
    again, head = hub.open(None, last_id, None)  # what EventSource does on its own
    assert [json.loads(b.split(b"data: ")[1])["event"]["text"] for b in head] == [str(i) for i in range(3, 10)]
    hub.close()
    assert (await asyncio.wait_for(_drain(hub, again, head), WAIT_S))[-1].startswith(b"event: end")


@pytest.mark.anyio
async def test_the_backlog_is_bounded_and_an_id_older_than_it_is_a_gap():
    hub = EventHub(backlog=5, queue_limit=100)
    hub.bind(asyncio.get_running_loop())
    for i in range(12):
        hub._publish("s1" if i % 2 else "s2", "t", {"type": "x", "n": i})
    _, head = hub.open(None, None, None)
    assert [json.loads(b.split(b"data: ")[1])["event"]["n"] for b in head] == [7, 8, 9, 10, 11]
    _, head = hub.open(None, f"{hub.boot}-2", None)
    assert head[0].startswith(b"event: gap") and len(head) == 6
    _, head = hub.open("s1", f"{hub.boot}-9", None)
    assert [json.loads(b.split(b"data: ")[1])["event"]["n"] for b in head] == [9, 11]
    _, head = hub.open(None, None, 0)
    assert head == []
