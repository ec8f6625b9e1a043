"""corvid_actors.testing — public tools for simulation and end-to-end tests.

- :class:`SimClock`: simulated time over freezegun; ``advance()`` fires timers in order.
  While one is open, ``time.monotonic()``, ``time.time()`` and ``time.perf_counter()`` are
  frozen in the whole test process: bound a test's real waits with :func:`real_monotonic`
  (also :func:`real_perf_counter`, :func:`real_time`; ``corvid_actors.testing.realtime``).
- :func:`arrange` (``corvid_actors.testing.arrangement``): state a test starts from, written
  to the store without running anything — personas, skill bundles, a session's history
  without delivering it, a stale ``running`` row as a crashed daemon leaves it, a session
  whose project was deleted.
- :class:`ScriptedProvider`: scripts per session (``for_session(sid, *turns)``) or shared;
  :class:`Turn` makes the turns — replies (text, deltas, tool calls, usage, latency in
  simulated time), crashes, outages, API errors of a kind, clean exits, start failures —
  and health-probe results.
- :class:`EventRecorder`: keeps every event with its simulated time; asserts timing.
- :func:`sim_runtime`: a Runtime on a SimClock, in-memory SQLite and a scripted provider.
- :func:`stub_provider`: the real Ollama / Anthropic provider pointed at a stub server.
- :func:`refuse_input` (``corvid_actors.testing.faults``): a running session refuses
  user messages, to test the refused-delivery path; :func:`kill_incarnation` (same
  module): a running session's actor crashes (restart with backoff); :func:`kill_runtime`:
  the whole runtime dies as on ``kill -9`` (nothing written on the way down), for a second
  runtime over the same store to recover; :class:`StoreFault`:
  a store refuses the Nth write of a chosen kind.
- Stub servers speaking the real wire protocols: ``corvid_actors.testing.ollama_stub``
  (:class:`OllamaStubServer`) and ``corvid_actors.testing.anthropic_stub``
  (:class:`AnthropicStubServer`); the Telegram Bot API: ``corvid_actors.testing.telegram_stub``
  (:class:`TelegramStubServer`, stdlib only).
- Record and replay (``corvid_actors.testing.replay``): a session journaled by a runtime
  (``[journal]``) loaded as a :class:`~corvid_actors.testing.replay.Recording`, replayed in
  simulated time with its first divergent call reported (``ReplayDivergence``), explored
  under seeded interleavings, or written as a pytest module (``export_test``; the
  ``corvid-actors export-test`` command).
- A pytest plugin (installed automatically) with fixtures ``sim_clock``, ``scripted``,
  ``runtime``, ``recorder``, ``arrange``, ``ollama_stub``, ``anthropic_stub``, ``telegram_stub``
  and ``replay_options`` (a replay test's ``--tolerate`` and ``--explore N``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corvid_actors.testing.arrangement import Arrangement, arrange
    from corvid_actors.testing.clock import SimClock
    from corvid_actors.testing.faults import (
        StoreFault,
        kill_incarnation,
        kill_runtime,
        refuse_input,
    )
    from corvid_actors.testing.realtime import real_monotonic, real_perf_counter, real_time
    from corvid_actors.testing.recorder import EventRecorder, Recorded
    from corvid_actors.testing.scripted import (
        ScriptedProvider,
        ScriptedStartFailure,
        ScriptedTurn,
        ScriptError,
        Turn,
    )
    from corvid_actors.testing.sim import sim_runtime, stub_provider

__all__ = ["SimClock", "ScriptedProvider", "ScriptedTurn", "ScriptedStartFailure", "ScriptError", "Turn",
           "EventRecorder", "Recorded", "StoreFault", "kill_incarnation", "kill_runtime", "refuse_input",
           "sim_runtime", "stub_provider", "arrange", "Arrangement", "real_monotonic", "real_perf_counter",
           "real_time"]

#: public name -> the submodule defining it. Imported on first use, so that the stub
#: servers (``corvid_actors.testing.ollama_stub``, used by the daemon of a plain install)
#: import nothing of the test extras: only :class:`SimClock` needs freezegun.
_LAZY = {"SimClock": "clock", "ScriptedProvider": "scripted", "ScriptedTurn": "scripted",
         "ScriptedStartFailure": "scripted", "Turn": "scripted", "EventRecorder": "recorder", "Recorded": "recorder",
         "ScriptError": "scripted", "refuse_input": "faults", "kill_incarnation": "faults",
         "kill_runtime": "faults", "StoreFault": "faults", "arrange": "arrangement", "Arrangement": "arrangement",
         "real_monotonic": "realtime", "real_perf_counter": "realtime", "real_time": "realtime",
         "sim_runtime": "sim", "stub_provider": "sim"}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
