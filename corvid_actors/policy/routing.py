"""Provider routing as tables: which provider a session uses, its default model, its loop.

Seed invariant 5: an explicit provider (the agent's, else ``providers.default_provider``)
wins; with none, Anthropic when credentials exist and the runtime has it, else Ollama (a
*fallback*, said in the ``provider_selected`` note). What the runtime then does with a
provider (slots, pid range) is the provider's own :class:`~corvid_actors.providers.base.ProviderTraits`,
never a comparison of names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from corvid_actors.schema.sections import ProvidersConfig

#: provider name -> the ``[providers]`` key naming its default model
DEFAULT_MODEL_KEYS: Mapping[str, str] = {
    "ollama": "ollama_default_model",
    "anthropic": "anthropic_default_model",
}
#: which loop a provider's sessions run unless the runtime says otherwise
DEFAULT_LOOP_FOR_PROVIDER: Mapping[str, str] = {"ollama": "direct", "anthropic": "sdk"}
#: model-name prefixes Ollama serves as is (besides any ``name:tag``)
OLLAMA_MODEL_PREFIXES = ("qwen", "llama")


@dataclass(frozen=True)
class RoutingDecision:
    """Which provider a session uses and why (the original's ``resolveProviderRouting``)."""

    provider: str
    #: agent_config | default | no_claude_access
    reason: str
    #: True when the session was routed away from what it would otherwise get (the
    #: Anthropic default), i.e. to Ollama for want of Anthropic access
    fallback: bool = False


#: the reason named in ``provider_selected`` when a session falls back to Ollama
FALLBACK_NO_CLAUDE_ACCESS = "no_claude_access"


def looks_like_ollama_model(model: str) -> bool:
    """Whether a model name can be sent to Ollama as is (the original's test: empty, a
    ``name:tag``, or a name in :data:`OLLAMA_MODEL_PREFIXES`); a cloud name such as
    ``claude-sonnet-4-6`` cannot."""
    return not model or ":" in model or model.startswith(OLLAMA_MODEL_PREFIXES)


def provider_selected_message(decision: RoutingDecision, model: str) -> str:
    """The ``provider_selected`` text: the original's "Provider: X (fallback: reason)" on a
    fallback; otherwise ours, which also names the model."""
    if decision.fallback:
        return f"Provider: {decision.provider} (fallback: {decision.reason})"
    return f"Provider: {decision.provider} ({model})"


def choose_provider(explicit: str, providers: ProvidersConfig, available: Mapping[str, object]) -> RoutingDecision:
    """The routing decision for a session whose agent names ``explicit`` ("" = none)."""
    explicit = explicit or providers.default_provider
    if explicit:
        return RoutingDecision(explicit, "agent_config")
    if providers.anthropic_api_key and "anthropic" in available:
        return RoutingDecision("anthropic", "default")
    return RoutingDecision("ollama", FALLBACK_NO_CLAUDE_ACCESS, fallback=True)


def default_model(provider_name: str, providers: ProvidersConfig) -> str:
    """The configured default model of a provider (a provider without one: its name)."""
    key = DEFAULT_MODEL_KEYS.get(provider_name)
    return str(getattr(providers, key)) if key is not None else provider_name
