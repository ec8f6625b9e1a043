"""The asyncio face (corvid_actors.aio): every method awaitable without blocking the loop,
event streams with a bounded, coalescing buffer, cancellation that only stops waiting."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from corvid_actors.actors.events import Publish
from corvid_actors.aio import AsyncRuntime, StreamOverflow
from corvid_actors.events import Assistant, ContentBlockDelta, ToolStatus
from tests.aio.conftest import real_runtime

pytestmark = pytest.mark.anyio

#: bound on every wait for the runtime (real time; the scripted provider answers at once)
WAIT_S = 5.0


async def until(stream, event_type):
    """Events of ``stream`` up to and including the first of ``event_type`` (bounded)."""
    seen = []
    async with asyncio.timeout(WAIT_S):
        async for event in stream:
            seen.append(event)
            if event.type == event_type:
                return seen
    raise AssertionError(f"stream ended before {event_type}: {[e.type for e in seen]}")


async def global_subscribers(art) -> int:
    return (await art.get_memory_stats())["global_subscribers"]


async def test_start_send_stop_and_queries(art, scripted):
    session = await art.create_session(source="web")
    scripted.reply("first answer")
    scripted.reply("second answer")
    async with art.events(session.id) as stream:
        assert await art.start_process(session.id, "hello") is not None
        events = await until(stream, "result")
        assert [e.content for e in events if e.type == "assistant"] == ["first answer"]
        assert await art.is_running(session.id)
        assert session.id in await art.get_active_session_ids()
        assert await art.send_message(session.id, "more") is True
        events = await until(stream, "result")
        assert [e.content for e in events if e.type == "assistant"] == ["second answer"]
        assert await art.extend_timeout(session.id, 60) is True
        info = await art.session_info(session.id)
        assert info[session.id]["running"] is True
        assert await art.get_plan(session.id) == []
        assert not await art.is_paused(session.id)
        assert await art.get_paused_session_ids() == []
        assert await art.resume_session(session.id) is False  # not paused
        await art.stop_process(session.id)
        stopped = await until(stream, "session_stopped")
        assert stopped[-1].reason == "user_stop"
    assert not await art.is_running(session.id)
    assert await art.send_message(session.id, "nobody listens") is False
    scripted.reply("resumed answer")
    async with art.events(session.id) as stream:
        await art.resume_process(session.id, "are you back?")
        events = await until(stream, "result")
        assert [e.content for e in events if e.type == "assistant"] == ["resumed answer"]
    await art.cleanup_session_state(session.id)
    await art.settle()
    assert await art.resume_pending_sessions() == []
    assert (await art.get_memory_stats())["global_subscribers"] == 0


async def test_approvals(scripted, tmp_path):
    art = AsyncRuntime(real_runtime(scripted, tmp_path, loop_for_provider={"scripted": "direct"}))
    try:
        (tmp_path / "ws").mkdir(exist_ok=True)
        (tmp_path / "ws" / "notes.txt").write_text("hello\n")
        scripted.tool_call("list_files", {"path": "."})
        scripted.reply("You have notes.txt.")
        assert await art.approval_mode() == "normal"
        session = await art.create_session(source="web")
        async with art.events(session.id) as stream:
            await art.start_process(session.id, "what files?")
            request = (await until(stream, "approval_request"))[-1]
            [pending] = await art.list_approvals(session.id)
            assert pending["id"] == request.id
            resolved = await art.resolve_approval(request.id, "allow", "go ahead")
            assert resolved is not None and resolved["id"] == request.id
            events = await until(stream, "result")
            assert "You have notes.txt." in [e.content for e in events if e.type == "assistant"]
            assert await art.resolve_approval(request.id, "deny") is None  # no longer pending
        assert await art.set_approval_mode("queued") == "queued"
        assert await art.approval_mode() == "queued"
    finally:
        await art.aclose()


async def test_credits(art):
    account = await art.open_credit_account("alice")
    assert account.created
    start = account.balance
    assert await art.grant_credits("alice", 7, reference="test") == start + 7
    assert await art.credit_balance("alice") == start + 7
    rows = await art.credit_transactions("alice", 5)
    assert rows[0]["amount"] == 7
    session = await art.create_session(source="chat", participant="alice")
    assert await art.charge_turn(session.id) is not None


async def test_cancelling_a_call_stops_waiting_only(art, scripted):
    session = await art.create_session(source="web")
    scripted.reply("still answered")
    async with art.events(session.id) as stream:
        task = asyncio.ensure_future(art.start_process(session.id, "hi"))
        await asyncio.sleep(0)  # the call is handed to a worker thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        events = await until(stream, "result")  # the session started and answered anyway
        assert [e.content for e in events if e.type == "assistant"] == ["still answered"]
    assert await art.is_running(session.id)


async def test_cancelling_a_reader_closes_its_stream_and_leaves_the_session_alone(art, scripted):
    session = await art.create_session(source="web")
    scripted.reply("hi")
    opened = asyncio.Event()

    async def reader():
        async with art.events(session.id) as stream:
            opened.set()
            async for _ in stream:
                pass

    task = asyncio.ensure_future(reader())
    async with asyncio.timeout(WAIT_S):
        await opened.wait()
    assert await global_subscribers(art) == 1
    await art.start_process(session.id, "hello")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await global_subscribers(art) == 0
    await art.settle()
    assert await art.is_running(session.id)


async def publish(art, session_id, *events):
    for event in events:
        art.runtime.internals.bus.tell(Publish(session_id, event))
    await art.settle()  # the bus has handed every event to the subscribers


async def test_a_slow_reader_gets_deltas_coalesced_and_every_other_event(art):
    async with art.events("s1") as stream:
        # nobody reads while 500 deltas and two tool events arrive
        await publish(art, "s1", ToolStatus(tool_name="a"),
                      *[ContentBlockDelta(text=f"{i} ") for i in range(250)],
                      ToolStatus(tool_name="b"),
                      *[ContentBlockDelta(text=f"{i} ") for i in range(250, 500)],
                      Assistant(content="done"))
        await publish(art, "other", Assistant(content="not mine"))
        got = []
        async with asyncio.timeout(WAIT_S):
            async for event in stream:
                got.append(event)
                if event.type == "assistant":
                    break
    assert [e.type for e in got] == ["tool_status", "content_block_delta", "tool_status",
                                     "content_block_delta", "assistant"]
    assert got[1].text == "".join(f"{i} " for i in range(250))
    assert got[3].text == "".join(f"{i} " for i in range(250, 500))
    assert stream.coalesced == 498
    assert got[-1].content == "done"


async def test_a_reader_too_far_behind_gets_an_overflow_and_is_unsubscribed_then_reconnects(art):
    async with art.events("s1", max_pending=10) as stream:
        await publish(art, "s1", *[ToolStatus(tool_name=f"t{i}") for i in range(25)])
        got = []
        async with asyncio.timeout(WAIT_S):
            async for event in stream:  # ends by itself after the overflow
                got.append(event)
        assert stream.overflowed
        assert [e.tool_name for e in got[:10]] == [f"t{i}" for i in range(10)]  # none dropped before
        assert isinstance(got[10], StreamOverflow) and got[10].dropped_after == 10
        assert len(got) == 11
        await art.settle()
        assert await global_subscribers(art) == 0  # unsubscribed, memory bounded
    async with art.events("s1") as again:  # reconnecting: a new stream hears new events
        await publish(art, "s1", ToolStatus(tool_name="after"))
        async with asyncio.timeout(WAIT_S):
            assert (await anext(again)).tool_name == "after"


async def test_all_events_yields_pairs_of_every_session(art):
    async with art.all_events() as stream:
        await publish(art, "a", Assistant(content="from a"))
        await publish(art, "b", Assistant(content="from b"))
        async with asyncio.timeout(WAIT_S):
            first, second = await anext(stream), await anext(stream)
    assert [(sid, e.content) for sid, e in (first, second)] == [("a", "from a"), ("b", "from b")]


async def test_thousands_of_events_never_block_the_loop(art):
    """A ticker task keeps ticking while 5,000 events flow through a stream."""
    count = 5000
    loop = asyncio.get_running_loop()
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker():
        last = loop.time()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = loop.time()
            gaps.append(now - last)
            last = now

    tick_task = asyncio.ensure_future(ticker())
    async with art.events("busy", max_pending=count + 10) as stream:
        def produce():
            for i in range(count):
                art.runtime.internals.bus.tell(Publish("busy", ToolStatus(tool_name=str(i))))
        producing = loop.run_in_executor(None, produce)
        received = 0
        async with asyncio.timeout(30):
            async for event in stream:
                assert event.tool_name == str(received)  # in order, none lost
                received += 1
                if received == count:
                    break
        await producing
    stop.set()
    await tick_task
    assert received == count
    assert gaps  # the ticker ran while the events flowed
    # a loop blocked by a runtime call would show a gap as long as the whole run
    assert max(gaps) < 0.5, max(gaps)


async def test_a_closed_async_runtime_refuses_calls(scripted, tmp_path):
    art = AsyncRuntime(real_runtime(scripted, tmp_path))
    await art.aclose()
    await art.aclose()  # idempotent
    from corvid_actors.errors import RuntimeStoppedError
    with pytest.raises(RuntimeStoppedError):
        await art.is_running("x")


def test_works_under_asyncio_run_and_uvloop(scripted, tmp_path):
    async def main():
        rt = AsyncRuntime(real_runtime(scripted, tmp_path))
        try:
            session = await rt.create_session(source="web")
            scripted.reply("pong")
            async with rt.events(session.id) as stream:
                await rt.start_process(session.id, "ping")
                events = await until(stream, "result")
            return [e.content for e in events if e.type == "assistant"]
        finally:
            await rt.aclose()

    assert asyncio.run(main()) == ["pong"]
    if importlib.util.find_spec("uvloop") is not None:
        import uvloop

        assert uvloop.run(main()) == ["pong"]


async def test_create_builds_the_runtime_off_the_loop(scripted, tmp_path):
    from corvid_actors.clock import RealClock
    from corvid_actors.config import Config

    cfg = Config().replace(providers={"default_provider": scripted.name})
    art = await AsyncRuntime.create(cfg, clock=RealClock(), store_url="sqlite:///:memory:",
                                    providers={scripted.name: scripted}, workspace_dir=tmp_path / "ws")
    try:
        assert await art.get_active_session_ids() == []
    finally:
        await art.aclose()


async def test_agents_projects_sessions_and_messages_are_awaitable(art, scripted, tmp_path):
    agent = await art.create_agent("helper", provider=scripted.name, model="m")
    assert (await art.ensure_agent("HELPER")).id == agent.id  # case-insensitive, not created twice
    assert (await art.update_agent(agent.id, system_prompt="be brief")).system_prompt == "be brief"
    assert (await art.agent("helper")).id == agent.id
    assert [a.name for a in await art.agents()] == ["helper"]
    project = await art.create_project("proj", tmp_path / "proj")
    assert (await art.project("proj")).id == project.id
    session = await art.create_session(agent_id=agent.id, project_id=project.id, source="web", channel="c1")
    assert await art.find_session(source="web", channel="c1") == session.id
    scripted.reply("an answer")
    async with art.events(session.id) as stream:
        await art.start_process(session.id, "a question")
        await until(stream, "result")
    await art.settle()
    assert (await art.session(session.id)).channel == "c1"
    assert [(m.role, m.content) for m in await art.history(session.id)] == [
        ("user", "a question"), ("assistant", "an answer")]
    assert await art.message_count(session.id) == 2
    assert await art.get_tool_outputs(session.id) == []
    assert await art.route(agent) == scripted.name and await art.has_provider(scripted.name)
    assert await art.take_restart_pending() == []
