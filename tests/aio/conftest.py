"""Fixtures for the asyncio face: anyio's pytest plugin (shipped with anyio, already a
dependency of our HTTP clients) runs each test on asyncio, and on uvloop when installed.

The runtime runs on the real clock with the scripted provider: asyncio's own timers read
``time.monotonic``, which a frozen simulated clock would stop.
"""

from __future__ import annotations

import importlib.util

import pytest

from corvid_actors.aio import AsyncRuntime
from corvid_actors.clock import RealClock
from corvid_actors.config import Config
from corvid_actors.runtime import Runtime
from corvid_actors.testing import ScriptedProvider

BACKENDS = [pytest.param(("asyncio", {}), id="asyncio")]
if importlib.util.find_spec("uvloop") is not None:
    BACKENDS.append(pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"))


@pytest.fixture(params=BACKENDS)
def anyio_backend(request):
    return request.param


@pytest.fixture
def scripted() -> ScriptedProvider:
    return ScriptedProvider()


def real_runtime(scripted: ScriptedProvider, tmp_path, **kwargs) -> Runtime:
    cfg = Config().replace(providers={"default_provider": scripted.name})
    return Runtime(cfg, clock=RealClock(), store_url="sqlite:///:memory:", providers={scripted.name: scripted},
                   workspace_dir=tmp_path / "ws", **kwargs)


@pytest.fixture
async def art(scripted, tmp_path):
    rt = AsyncRuntime(real_runtime(scripted, tmp_path, with_credits=True))
    yield rt
    await rt.aclose()
