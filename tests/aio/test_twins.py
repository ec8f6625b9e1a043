"""Every public Runtime method has an AsyncRuntime twin: the same signature (parameter names,
kinds, defaults, annotations), awaitable, with the Runtime method's docstring — or an entry
in ``corvid_actors.aio.WITHOUT_TWIN`` saying how an asyncio program does it instead."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from corvid_actors.aio import WITHOUT_TWIN, AsyncRuntime
from corvid_actors.clock import RealClock
from corvid_actors.runtime import Runtime
from corvid_actors.testing import ScriptedProvider
from tests.aio.conftest import real_runtime

#: bound on every wait for the runtime (real time)
WAIT_S = 5.0


def public_runtime_methods() -> list[str]:
    return [name for name, member in inspect.getmembers(Runtime)
            if not name.startswith("_") and inspect.isfunction(member)]


def test_there_are_runtime_methods_to_check():
    names = public_runtime_methods()
    assert {"create_agent", "ensure_agent", "update_agent", "session", "history", "start_process",
            "send_message", "run_tool"} <= set(names)


@pytest.mark.parametrize("name", [n for n in public_runtime_methods() if n not in WITHOUT_TWIN])
def test_every_public_runtime_method_has_an_awaitable_twin_with_the_same_signature(name):
    method = getattr(Runtime, name)
    twin = getattr(AsyncRuntime, name, None)
    assert twin is not None, (f"Runtime.{name} has no AsyncRuntime twin: add `{name} = _twin(Runtime.{name})` "
                              "to AsyncRuntime, or say in WITHOUT_TWIN why an asyncio program needs none")
    assert inspect.iscoroutinefunction(twin), f"AsyncRuntime.{name} must be awaitable"
    assert inspect.signature(twin) == inspect.signature(method)
    assert twin.__name__ == name
    assert twin.__qualname__ == f"AsyncRuntime.{name}"
    doc = inspect.getdoc(twin)
    assert doc is not None and "off the event loop" in doc
    if method.__doc__:
        assert doc.startswith(inspect.getdoc(method))


def test_a_bound_twin_has_the_bound_methods_signature():
    rt = AsyncRuntime.__new__(AsyncRuntime)  # no runtime: only the binding is looked at
    assert inspect.signature(rt.grant_credits) == inspect.signature(Runtime.grant_credits).replace(
        parameters=list(inspect.signature(Runtime.grant_credits).parameters.values())[1:])
    assert inspect.iscoroutinefunction(rt.grant_credits)


def test_each_method_without_a_twin_is_a_runtime_method_and_says_why():
    for name, reason in WITHOUT_TWIN.items():
        assert name in public_runtime_methods(), f"WITHOUT_TWIN names {name}, which Runtime no longer has"
        assert not hasattr(AsyncRuntime, name), f"AsyncRuntime.{name} exists: drop it from WITHOUT_TWIN"
        assert len(reason.split()) >= 4, f"WITHOUT_TWIN[{name!r}] should say what to do instead"


def test_aclose_takes_shutdowns_parameters():
    shutdown = list(inspect.signature(Runtime.shutdown).parameters.values())
    aclose = list(inspect.signature(AsyncRuntime.aclose).parameters.values())
    assert aclose == shutdown


@pytest.mark.anyio
async def test_a_twin_waits_off_the_event_loop(tmp_path):
    """The loop keeps running while a twin waits on the runtime (settle, over a turn that
    takes 0.3 real seconds)."""
    scripted = ScriptedProvider(clock=RealClock())
    scripted.reply("slow answer", latency_s=0.3)
    art = AsyncRuntime(real_runtime(scripted, tmp_path))
    try:
        session = await art.create_session(source="web")
        await art.start_process(session.id, "hello")
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticking = asyncio.ensure_future(ticker())
        async with asyncio.timeout(WAIT_S):
            await art.settle()
        ticking.cancel()
        assert ticks >= 5, ticks  # a blocked loop would not have ticked at all
        assert [m.content for m in await art.history(session.id) if m.role == "assistant"] == ["slow answer"]
    finally:
        await art.aclose()
