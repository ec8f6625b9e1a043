"""Providers declare how the runtime treats their sessions; nobody compares names."""

from __future__ import annotations

import pytest

from corvid_actors.config import Config
from corvid_actors.policy.routing import choose_provider, default_model
from corvid_actors.providers.anthropic import AnthropicProvider
from corvid_actors.providers.base import DEFAULT_TRAITS, ProviderTraits, traits_of
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing import ScriptedProvider, sim_runtime


def test_each_provider_declares_its_traits() -> None:
    assert traits_of(AnthropicProvider("k")) == ProviderTraits(uses_slots=False, pid_kind="sdk")
    assert traits_of(OllamaProvider("http://127.0.0.1:1")) == ProviderTraits(uses_slots=True, pid_kind="direct")
    assert traits_of(ScriptedProvider()) == ProviderTraits(uses_slots=False, pid_kind="direct")


def test_a_scripted_provider_may_stand_in_for_another() -> None:
    local = ProviderTraits(uses_slots=True, pid_kind="direct")
    assert traits_of(ScriptedProvider(traits=local)) is local
    assert traits_of(ScriptedProvider()) != local  # the class default is untouched


def test_a_provider_without_traits_gets_the_defaults() -> None:
    class Bare:
        name = "bare"

    assert traits_of(Bare()) is DEFAULT_TRAITS == ProviderTraits(uses_slots=False, pid_kind="direct")


def test_routing_table() -> None:
    providers = Config().providers
    with_key = Config().replace(providers={"anthropic_api_key": "k"}).providers
    assert choose_provider("ollama", with_key, {"anthropic": 1}).reason == "agent_config"
    assert choose_provider("", with_key, {"anthropic": 1}).provider == "anthropic"
    fallback = choose_provider("", providers, {"anthropic": 1})
    assert (fallback.provider, fallback.fallback) == ("ollama", True)
    assert default_model("ollama", providers) == providers.ollama_default_model
    assert default_model("anthropic", providers) == providers.anthropic_default_model
    assert default_model("scripted", providers) == "scripted"


@pytest.mark.parametrize(("traits", "pid_range", "grants"), [
    (ProviderTraits(uses_slots=True, pid_kind="sdk"), (900000, 1000000), 1),
    (ProviderTraits(uses_slots=False, pid_kind="direct"), (800000, 900000), 0),
])
def test_the_runtime_routes_by_the_providers_traits_not_its_name(traits, pid_range, grants, sim_clock):
    clock = sim_clock
    provider = ScriptedProvider(clock, traits=traits)  # registered as "scripted" either way
    # the direct loop asks for a slot before each model call; the pool answers only if the
    # provider's traits say it uses slots
    rt = sim_runtime(clock, provider, loop_for_provider={"scripted": "direct"},
                     config={"direct_loop": {"use_tier_caps": False}})
    try:
        session = rt.create_session()
        rt.start_process(session.id, "hi")
        rt.settle()
        assert pid_range[0] <= rt.internals.store.get_session(session.id).pid < pid_range[1]
        assert rt.slot_stats()["grants"] == grants
    finally:
        rt.shutdown()
