"""Providers declare how the runtime treats their sessions; nobody compares names."""

from __future__ import annotations

from corvid_actors.config import Config
from corvid_actors.providers.anthropic import AnthropicProvider
from corvid_actors.providers.base import DEFAULT_TRAITS, ProviderTraits, traits_of
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.routing import choose_provider, default_model
from corvid_actors.testing import ScriptedProvider


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
