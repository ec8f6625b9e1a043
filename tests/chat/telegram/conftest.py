"""Fixtures for the asyncio chat bridge and the Telegram transport (anyio's plugin, asyncio;
uvloop is covered by tests/aio). The runtime runs on the real clock with the scripted
provider, the Telegram client talks HTTP to the loopback Bot API stub: every wait is bounded."""

from __future__ import annotations

import asyncio

import pytest

from corvid_actors.clock import RealClock
from corvid_actors.config import Config
from corvid_actors.runtime import Runtime
from corvid_actors.testing import ScriptedProvider
from corvid_actors.testing.telegram_stub import TelegramStubServer

#: real seconds any one expectation may take (the stub and the scripted provider answer at once)
WAIT_S = 5.0


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def scripted() -> ScriptedProvider:
    return ScriptedProvider()


def make_runtime(scripted, tmp_path, **kwargs) -> Runtime:
    # the transport's tests answer every message in turn (a chat agent would interrupt a
    # turn for the participant's next message: tests/sim/test_double_texting.py)
    cfg = Config().replace(providers={"default_provider": scripted.name}, agents={"double_texting": "enqueue"})
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "notes.txt").write_text("hello\n")
    return Runtime(cfg, clock=RealClock(), store_url="sqlite:///:memory:", providers={scripted.name: scripted},
                   workspace_dir=tmp_path / "ws", **kwargs)


@pytest.fixture
def runtime(scripted, tmp_path):
    rt = make_runtime(scripted, tmp_path)
    yield rt
    rt.shutdown()


@pytest.fixture
def tool_runtime(scripted, tmp_path):
    """The direct loop, which asks approval for the scripted tool calls."""
    rt = make_runtime(scripted, tmp_path, loop_for_provider={scripted.name: "direct"})
    yield rt
    rt.shutdown()


@pytest.fixture
def tg():
    with TelegramStubServer() as stub:
        yield stub


class Sleeps:
    """The transport's retry waits: recorded, and waited for a token moment only."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0.001)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


async def eventually(predicate, timeout_s: float = WAIT_S):
    """Await until ``predicate()`` is truthy (bounded); returns its value."""
    async with asyncio.timeout(timeout_s):
        while not (value := predicate()):
            await asyncio.sleep(0.01)
    return value
