"""The simulation entry points of :mod:`corvid_actors.testing`: a Runtime on a simulated
clock (:func:`sim_runtime`) and the real providers pointed at the stub servers
(:func:`stub_provider`). Imported on first use of either name (the SimClock needs freezegun,
an optional dependency: the test extra)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from corvid_actors.actors.base import DispatcherKind
from corvid_actors.config import Config
from corvid_actors.providers.anthropic import AnthropicProvider
from corvid_actors.providers.base import Provider
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.runtime import Runtime
from corvid_actors.runtime.lifecycle import freeze_startup_heap
from corvid_actors.testing.anthropic_stub import AnthropicStubServer
from corvid_actors.testing.clock import SimClock
from corvid_actors.testing.ollama_stub import OllamaStubServer
from corvid_actors.testing.scripted import ScriptedProvider

#: the dispatcher ``sim_runtime`` uses unless told (``CORVID_SIM_DISPATCHER`` overrides it,
#: so a whole suite can run under the other one)
DEFAULT_DISPATCHER: DispatcherKind = "inline" if os.environ.get("CORVID_SIM_DISPATCHER", "inline") == "inline" \
    else "threads"

#: how many objects the first ``sim_runtime`` of this process froze (None: not yet)
_frozen_at_first_runtime: int | None = None


def sim_runtime(clock: SimClock | None = None, provider: Provider | None = None, *,
                config: Config | Mapping[str, Mapping[str, object]] | None = None,
                store_url: str = "sqlite:///:memory:", workspace_dir: str | Path | None = None,
                dispatcher: DispatcherKind | None = None, seed: int | None = None, explore: bool = False,
                configured_providers: bool = False, **runtime_kwargs: Any) -> Runtime:
    """A Runtime for simulations: simulated clock, in-memory SQLite, scripted provider.

    The scripted provider is the default provider (``providers.default_provider``) and,
    unless told otherwise, the only one. ``configured_providers=True`` puts it *beside* the
    providers the config builds (Ollama, Anthropic with a key: ``Runtime(extra_providers=
    …)``), for a simulation where some agents are scripted and others route to a real or
    stub model server; ``providers=`` (a Runtime argument) replaces the set instead.
    ``config`` is a ``Config``, or overrides by section for the default one:
    ``sim_runtime(config={"direct_loop": {"use_tier_caps": False}})``. ``runtime_kwargs``
    go to ``Runtime`` as they are.

    ``dispatcher``: ``"inline"`` runs every actor's messages on the thread that advances
    the clock or settles (no actor threads; deterministic order; see
    :class:`~corvid_actors.actors.inline.InlineDispatcher`), ``"threads"`` gives each actor
    its Pykka thread as a real runtime does; unset, it is ``"inline"`` (or what
    ``CORVID_SIM_DISPATCHER`` says), and always ``"inline"`` with ``explore=True``, which
    picks the next ready actor with ``random.Random(seed)`` instead of in order: run a
    scenario under many seeds to check it under many interleavings, and replay a failing
    one by its seed.

    Streamed deltas are not coalesced in a simulation (``supervisor.coalesce_deltas`` is
    off unless the overrides turn it on, or a ``Config`` is given): a scripted reply of
    ``deltas=3`` reaches subscribers as three ``content_block_delta`` events every run.
    Sessions are not passivated (``session.passivate_after_s`` is 0) unless the overrides
    turn it on or a ``Config`` is given: a simulation's sessions keep their actors.

    The first call in a process freezes the heap it finds (``gc.freeze()``, as the daemon
    does after start-up: :func:`~corvid_actors.runtime.lifecycle.freeze_startup_heap`):
    the imported modules' ~190,000 objects are never walked again by a full collection,
    which cost 120-150 ms, in about one 100-session simulated day out of three, and 20-30
    ms after the freeze. Later calls freeze nothing: what earlier simulations left stays
    collectable. Frozen objects are still freed by reference counting.
    """
    global _frozen_at_first_runtime
    if dispatcher is None:
        dispatcher = "inline" if explore else DEFAULT_DISPATCHER
    elif explore and dispatcher != "inline":
        raise ValueError(f"explore=True needs the inline dispatcher (got dispatcher={dispatcher!r})")
    if _frozen_at_first_runtime is None:
        _frozen_at_first_runtime = freeze_startup_heap()
    clock = clock or SimClock()
    provider = provider or ScriptedProvider(clock)
    if isinstance(config, Config):
        cfg = config
    else:
        cfg = Config().replace(supervisor={"coalesce_deltas": False}, session={"passivate_after_s": 0.0}).replace(
            **(config or {}))
    cfg = cfg.replace(providers={"default_provider": provider.name})
    providers = runtime_kwargs.pop("providers", None)
    if configured_providers:
        runtime_kwargs["extra_providers"] = {**runtime_kwargs.get("extra_providers", {}), provider.name: provider}
    else:
        providers = providers or {provider.name: provider}
    runtime = Runtime(cfg, clock=clock, store_url=store_url, providers=providers,
                      workspace_dir=workspace_dir, dispatcher=dispatcher, seed=seed, explore=explore,
                      **runtime_kwargs)
    if isinstance(provider, ScriptedProvider):  # a ScriptError names the loop its sessions run
        provider.loop_kind = runtime.internals.builder.loop_for_provider.get(provider.name, "conversation")
    return runtime


def stub_provider(stub: OllamaStubServer | AnthropicStubServer, **options: Any) -> Provider:
    """The real provider for a stub server: ``OllamaProvider(stub.url)`` for an
    :class:`~corvid_actors.testing.ollama_stub.OllamaStubServer`, ``AnthropicProvider`` (key
    ``"test-key"``, ``base_url=stub.url``) for an
    :class:`~corvid_actors.testing.anthropic_stub.AnthropicStubServer`. ``options`` go to
    the provider's constructor."""
    if isinstance(stub, OllamaStubServer):
        return OllamaProvider(stub.url, **options)
    if isinstance(stub, AnthropicStubServer):
        options.setdefault("base_url", stub.url)
        return AnthropicProvider(options.pop("api_key", "test-key"), **options)
    raise TypeError(f"not a stub server: {type(stub).__name__}")
