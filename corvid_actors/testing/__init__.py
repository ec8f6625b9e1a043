"""corvid_actors.testing — public tools for simulation and end-to-end tests.

- :class:`SimClock`: simulated time over freezegun; ``advance()`` fires timers in order.
- :class:`ScriptedProvider`: scripts per session (``for_session(sid, *turns)``) or shared;
  :class:`Turn` makes the turns — replies (text, deltas, tool calls, usage, latency in
  simulated time), crashes, outages, API errors of a kind, clean exits, start failures —
  and health-probe results.
- :class:`EventRecorder`: keeps every event with its simulated time; asserts timing.
- :func:`sim_runtime`: a Runtime on a SimClock, in-memory SQLite and a scripted provider.
- :func:`stub_provider`: the real Ollama / Anthropic provider pointed at a stub server.
- :func:`refuse_input` (``corvid_actors.testing.faults``): a running session refuses
  user messages, to test the refused-delivery path; :func:`kill_incarnation` (same
  module): a running session's actor crashes (restart with backoff); :class:`StoreFault`:
  a store refuses the Nth write of a chosen kind.
- Stub servers speaking the real wire protocols: ``corvid_actors.testing.ollama_stub``
  (:class:`OllamaStubServer`) and ``corvid_actors.testing.anthropic_stub``
  (:class:`AnthropicStubServer`); the Telegram Bot API: ``corvid_actors.testing.telegram_stub``
  (:class:`TelegramStubServer`, stdlib only).
- A pytest plugin (installed automatically) with fixtures ``sim_clock``, ``scripted``,
  ``runtime``, ``recorder``, ``ollama_stub``, ``anthropic_stub`` and ``telegram_stub``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corvid_actors.testing.clock import SimClock
    from corvid_actors.testing.faults import StoreFault, kill_incarnation, refuse_input
    from corvid_actors.testing.recorder import EventRecorder, Recorded
    from corvid_actors.testing.scripted import (
        ScriptedProvider,
        ScriptedStartFailure,
        ScriptedTurn,
        Turn,
    )
    from corvid_actors.testing.sim import sim_runtime, stub_provider

__all__ = ["SimClock", "ScriptedProvider", "ScriptedTurn", "ScriptedStartFailure", "Turn", "EventRecorder",
           "Recorded", "StoreFault", "kill_incarnation", "refuse_input", "sim_runtime", "stub_provider"]

#: public name -> the submodule defining it. Imported on first use, so that the stub
#: servers (``corvid_actors.testing.ollama_stub``, used by the daemon of a plain install)
#: import nothing of the test extras: only :class:`SimClock` needs freezegun.
_LAZY = {"SimClock": "clock", "ScriptedProvider": "scripted", "ScriptedTurn": "scripted",
         "ScriptedStartFailure": "scripted", "Turn": "scripted", "EventRecorder": "recorder", "Recorded": "recorder",
         "refuse_input": "faults", "kill_incarnation": "faults", "StoreFault": "faults",
         "sim_runtime": "sim", "stub_provider": "sim"}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
