"""Pytest plugin (registered through the ``pytest11`` entry point): simulation fixtures.

- ``sim_clock``: a :class:`SimClock` (time frozen at 2026-01-01T00:00Z), closed after the test.
- ``scripted``: a :class:`ScriptedProvider` on that clock.
- ``runtime``: a Runtime on the clock, in-memory SQLite and the scripted provider, shut
  down after the test.
- ``recorder``: an :class:`EventRecorder` attached to ``runtime``.
- ``arrange``: the :class:`~corvid_actors.testing.arrangement.Arrangement` of ``runtime``'s
  store (personas, skill bundles, history, stale rows, deleted projects).
- ``telegram_stub``: a started loopback Telegram Bot API server (push participants'
  messages and button presses, read what the bot sent; see ``testing.telegram_stub``).
- ``ollama_stub`` / ``anthropic_stub``: a started loopback server speaking the real Ollama /
  Anthropic wire protocol (script it with ``add_reply``, ``add_tool_calls`` /
  ``add_tool_use``, ``add_fault``, …), stopped after the test; the provider environment
  variables (``ANTHROPIC_*``, ``OLLAMA_HOST``) are removed for the test. Point a runtime at
  one with ``sim_runtime(sim_clock, stub_provider(stub))``.
- ``replay_options``: the options of a replay test written by ``corvid-actors
  export-test`` (:mod:`corvid_actors.testing.replay`): ``--tolerate`` (accept prompt-only
  changes) and ``--explore N`` (also replay under N seeded interleavings).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from corvid_actors.testing import EventRecorder, ScriptedProvider, SimClock, sim_runtime
from corvid_actors.testing.anthropic_stub import AnthropicStubServer
from corvid_actors.testing.arrangement import Arrangement
from corvid_actors.testing.arrangement import arrange as arrange_for
from corvid_actors.testing.ollama_stub import OllamaStubServer
from corvid_actors.testing.telegram_stub import TelegramStubServer

if TYPE_CHECKING:  # the runtime is imported when a fixture runs
    from corvid_actors.runtime import Runtime

#: environment variables the real clients read behind a test's back
PROVIDER_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "OLLAMA_HOST")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("corvid-replay", "replay tests written by corvid-actors export-test")
    group.addoption("--tolerate", action="store_true", default=False,
                    help="replay tests: accept prompt-only changes (a different last user message)")
    group.addoption("--explore", action="store", type=int, default=0, metavar="N",
                    help="replay tests: also replay under N seeded interleavings and report the seeds "
                         "that break an invariant")


@dataclass(frozen=True)
class ReplayOptions:
    """``--tolerate`` and ``--explore N`` for a replay test."""

    tolerate: bool = False
    explore: int = 0


@pytest.fixture
def replay_options(pytestconfig: pytest.Config) -> ReplayOptions:
    explore = int(pytestconfig.getoption("--explore") or 0)
    if explore < 0:
        raise pytest.UsageError(f"--explore {explore}: the number of interleavings must be 0 or more")
    return ReplayOptions(tolerate=bool(pytestconfig.getoption("--tolerate")), explore=explore)


@pytest.fixture
def sim_clock() -> Iterator[SimClock]:
    clock = SimClock()
    yield clock
    clock.close()


@pytest.fixture
def scripted(sim_clock: SimClock) -> ScriptedProvider:
    return ScriptedProvider(sim_clock)


@pytest.fixture
def runtime(sim_clock: SimClock, scripted: ScriptedProvider, tmp_path: Path) -> Iterator[Runtime]:
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "workspace")
    yield rt
    rt.shutdown()


@pytest.fixture
def recorder(runtime: Runtime) -> EventRecorder:
    return EventRecorder.attach(runtime)


@pytest.fixture
def arrange(runtime: Runtime) -> Arrangement:
    """State for the test to start from, in ``runtime``'s store (``testing.arrangement``)."""
    return arrange_for(runtime)


@pytest.fixture
def ollama_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OllamaStubServer]:
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    with OllamaStubServer() as stub:
        yield stub


@pytest.fixture
def anthropic_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[AnthropicStubServer]:
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    with AnthropicStubServer() as stub:
        yield stub


@pytest.fixture
def telegram_stub() -> Iterator[TelegramStubServer]:
    """A started loopback Telegram Bot API server (``TelegramStubServer``), stopped after the test."""
    with TelegramStubServer() as stub:
        yield stub
