"""Pytest plugin (registered through the ``pytest11`` entry point): simulation fixtures.

- ``sim_clock``: a :class:`SimClock` (time frozen at 2026-01-01T00:00Z), closed after the test.
- ``scripted``: a :class:`ScriptedProvider` on that clock.
- ``runtime``: a Runtime on the clock, in-memory SQLite and the scripted provider, shut
  down after the test.
- ``recorder``: an :class:`EventRecorder` attached to ``runtime``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from corvid_actors.testing import EventRecorder, ScriptedProvider, SimClock, sim_runtime


@pytest.fixture
def sim_clock() -> Iterator[SimClock]:
    clock = SimClock()
    yield clock
    clock.close()


@pytest.fixture
def scripted(sim_clock: SimClock) -> ScriptedProvider:
    return ScriptedProvider(sim_clock)


@pytest.fixture
def runtime(sim_clock: SimClock, scripted: ScriptedProvider, tmp_path: Any) -> Iterator[Any]:
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "workspace")
    yield rt
    rt.shutdown()


@pytest.fixture
def recorder(runtime: Any) -> EventRecorder:
    return EventRecorder.attach(runtime)
