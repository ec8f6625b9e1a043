"""corvid_actors.testing — public tools for simulation and end-to-end tests.

- :class:`SimClock`: simulated time over freezegun; ``advance()`` fires timers in order.
- :class:`ScriptedProvider`: scripted replies, deltas, crashes, outages, health results,
  latency in simulated time.
- :class:`EventRecorder`: keeps every event with its simulated time.
- :func:`sim_runtime`: a Runtime on a SimClock, in-memory SQLite and a scripted provider.
- Stub servers speaking the real wire protocols: ``corvid_actors.testing.ollama_stub``
  (:class:`OllamaStubServer`) and ``corvid_actors.testing.anthropic_stub``
  (:class:`AnthropicStubServer`).
- A pytest plugin (installed automatically) with fixtures ``sim_clock``, ``scripted``,
  ``runtime`` and ``recorder``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corvid_actors.testing.clock import SimClock
    from corvid_actors.testing.recorder import EventRecorder, Recorded
    from corvid_actors.testing.scripted import ScriptedProvider, ScriptedTurn

__all__ = ["SimClock", "ScriptedProvider", "ScriptedTurn", "EventRecorder", "Recorded", "sim_runtime"]

#: public name -> the submodule defining it. Imported on first use, so that the stub
#: servers (``corvid_actors.testing.ollama_stub``, used by the daemon of a plain install)
#: import nothing of the test extras: only :class:`SimClock` needs freezegun.
_LAZY = {"SimClock": "clock", "ScriptedProvider": "scripted", "ScriptedTurn": "scripted",
         "EventRecorder": "recorder", "Recorded": "recorder"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def sim_runtime(clock: SimClock | None = None, provider: Any | None = None, *, config: Any = None,
                store_url: str = "sqlite:///:memory:", workspace_dir: str | Path | None = None,
                **runtime_kwargs: Any) -> Any:
    """A Runtime for simulations: simulated clock, in-memory SQLite, scripted provider.

    The scripted provider is the default provider (``providers.default_provider``).
    """
    from corvid_actors.config import Config
    from corvid_actors.runtime import Runtime
    from corvid_actors.testing.clock import SimClock
    from corvid_actors.testing.scripted import ScriptedProvider

    clock = clock or SimClock()
    provider = provider or ScriptedProvider(clock)
    cfg = config or Config()
    cfg = cfg.replace(providers={"default_provider": provider.name})
    providers = runtime_kwargs.pop("providers", None) or {provider.name: provider}
    return Runtime(cfg, clock=clock, store_url=store_url, providers=providers,
                   workspace_dir=workspace_dir, **runtime_kwargs)
