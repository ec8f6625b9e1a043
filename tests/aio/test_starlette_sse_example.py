"""examples/starlette_sse.py: the README's web example, served by a real uvicorn on an
ephemeral loopback port, on the scripted model; an httpx client reads the SSE stream."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType

import httpx
import pytest
import uvicorn

from corvid_actors.aio import AsyncRuntime
from corvid_actors.testing import ScriptedProvider
from tests.aio.conftest import real_runtime

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "starlette_sse.py"
#: bound on every wait (real time; the scripted model answers at once)
WAIT_S = 10.0


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("starlette_sse_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = load_example()


@asynccontextmanager
async def serving(app) -> AsyncIterator[str]:
    """``app`` on uvicorn at 127.0.0.1:<a free port>, in this event loop; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning"))
    task = asyncio.ensure_future(server.serve())
    try:
        async with asyncio.timeout(WAIT_S):
            while not server.started:
                assert not task.done(), "uvicorn stopped while starting"
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        async with asyncio.timeout(WAIT_S):
            await task


async def post_and_read_events(client: httpx.AsyncClient, url: str, text: str) -> list[tuple[str, dict]]:
    """POST ``text`` and parse the SSE reply into ``(event, data)`` pairs, until it ends."""
    events: list[tuple[str, dict]] = []
    async with client.stream("POST", url, content=text) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        name = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
    return events


@pytest.fixture
async def served(scripted: ScriptedProvider, tmp_path) -> AsyncIterator[tuple[AsyncRuntime, str]]:
    rt = AsyncRuntime(real_runtime(scripted, tmp_path))
    try:
        agent = await rt.create_agent("web-chat", provider=scripted.name, model="scripted-model")
        async with serving(example.create_app(rt, agent_id=agent.id)) as base_url:
            yield rt, base_url
    finally:
        await rt.aclose()


async def test_a_reply_streams_as_deltas_that_join_up_to_the_final_reply(served, scripted):
    rt, base_url = served
    scripted.reply("Hello there! Streaming works over SSE.", deltas=6)
    scripted.reply("Second answer, same conversation.", deltas=3)
    async with httpx.AsyncClient(timeout=WAIT_S) as client:
        first = await post_and_read_events(client, f"{base_url}/chat/demo", "hello")
        second = await post_and_read_events(client, f"{base_url}/chat/demo", "and again")

    for events, reply in ((first, "Hello there! Streaming works over SSE."),
                          (second, "Second answer, same conversation.")):
        *deltas, (final, data) = events
        assert final == "reply" and data["text"] == reply
        assert deltas and {name for name, _ in deltas} == {"delta"}
        assert "".join(d["text"] for _, d in deltas) == data["text"]
    # one session per conversation, found again with its history
    session_id = first[-1][1]["session_id"]
    assert second[-1][1]["session_id"] == session_id
    assert await rt.find_session(source="web", channel="demo") == session_id
    assert [m.content for m in await rt.history(session_id) if m.role in ("user", "assistant")] == [
        "hello", "Hello there! Streaming works over SSE.", "and again", "Second answer, same conversation."]


async def test_a_failed_turn_ends_the_stream_with_an_error_event(served, scripted):
    _, base_url = served
    scripted.crash("the model fell over")
    async with httpx.AsyncClient(timeout=WAIT_S) as client:
        events = await post_and_read_events(client, f"{base_url}/chat/broken", "hello")
        empty = await client.post(f"{base_url}/chat/broken", content="  ")
    assert events[-1][0] == "error" and "the model fell over" in events[-1][1]["message"]
    assert empty.status_code == 400


async def test_a_reply_that_does_not_come_in_time_ends_the_stream_and_not_the_server(scripted, tmp_path):
    # the direct loop asks before a tool runs: nobody approves, so the turn waits
    rt = AsyncRuntime(real_runtime(scripted, tmp_path, loop_for_provider={scripted.name: "direct"}))
    scripted.tool_call("list_files", {"path": "."})
    scripted.reply("never read")
    try:
        async with serving(example.create_app(rt, reply_timeout_s=0.3)) as base_url:
            async with httpx.AsyncClient(timeout=WAIT_S) as client:
                events = await post_and_read_events(client, f"{base_url}/chat/waiting", "list my files")
                assert events == [("error", {"message": "no reply within 0.3 s",
                                             "session_id": events[-1][1]["session_id"]})]
                [pending] = await rt.list_approvals(events[-1][1]["session_id"])
                assert pending["tool_name"] == "list_files"  # the session goes on waiting
                assert (await client.post(f"{base_url}/chat/other", content="")).status_code == 400  # still serving
    finally:
        await rt.aclose()


def test_the_guide_shows_the_examples_own_lines():
    guide = (EXAMPLE.parents[1] / "docs" / "site" / "chat" / "asyncio.md").read_text(encoding="utf-8")
    section = guide.split("## A web chat over SSE (Starlette)", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, re.S)
    source = EXAMPLE.read_text(encoding="utf-8")
    shown = [line for line in block.splitlines() if line.strip() and line.strip() != "..."]
    assert len(shown) > 5
    for line in shown:
        assert line.strip() in source, f"the guide shows a line the example does not have: {line!r}"
