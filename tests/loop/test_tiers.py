"""Model tiers from model names (original-facts §4 tier table), as table tests."""

from __future__ import annotations

import pytest

from corvid_actors.loop.tiers import (
    DEFAULT_TIER_CAPS,
    ModelTier,
    TierCaps,
    caps_for_model,
    is_cloud_model,
    parameter_size_b,
    tier_for_model,
)


@pytest.mark.parametrize(
    ("model", "tier"),
    [
        ("claude-sonnet-4", ModelTier.HIGH),
        ("anthropic/claude", ModelTier.HIGH),
        ("openai/gpt-oss", ModelTier.HIGH),
        ("gpt-4o", ModelTier.HIGH),
        ("qwen3:14b", ModelTier.LIMITED),  # capable family under 20 B
        ("qwen3:32b", ModelTier.STANDARD),
        ("qwen2.5-coder:32b", ModelTier.STANDARD),
        ("qwen3-coder:480b-cloud", ModelTier.HIGH),
        ("deepseek-v3.1:671b-cloud", ModelTier.HIGH),
        ("llama3.1:70b", ModelTier.STANDARD),
        ("llama3.2:3b", ModelTier.LIMITED),
        ("mistral", ModelTier.STANDARD),  # no size: capable family counts as large enough
        ("kimi-k2:1t-cloud", ModelTier.HIGH),
        ("minimax-m2.5:cloud", ModelTier.HIGH),
        ("phi3:3.8b", ModelTier.LIMITED),
        ("gemma3:27b", ModelTier.LIMITED),  # weaker family under 30 B
        ("gemma3:30b", ModelTier.STANDARD),
        ("glm-4.6:cloud", ModelTier.STANDARD),  # weaker family, cloud
        ("llama-3.1-nemotron:70b", ModelTier.STANDARD),  # weaker family matched first
        ("llama-3.1-nemotron:8b", ModelTier.LIMITED),
        ("devstral", ModelTier.LIMITED),
        ("mixtral:8x7b", ModelTier.STANDARD),  # unknown family, 56 B
        ("some-model", ModelTier.LIMITED),
        ("some-model-cloud", ModelTier.STANDARD),
        ("scripted", ModelTier.LIMITED),
    ],
)
def test_tier_for_model(model: str, tier: ModelTier) -> None:
    assert tier_for_model(model) is tier


@pytest.mark.parametrize(
    ("model", "size"),
    [
        ("qwen3:14b", 14.0),
        ("phi3:3.8b", 3.8),
        ("mixtral:8x7b", 56.0),
        ("qwen3", None),
        ("llama3.1:70b-instruct", 70.0),
        ("gemma3n:e4b", None),
    ],
)
def test_parameter_size_b(model: str, size: float | None) -> None:
    assert parameter_size_b(model) == size


@pytest.mark.parametrize(
    ("model", "cloud"),
    [
        ("glm-4.6:cloud", True),
        ("qwen3-coder:480b-cloud", True),
        ("qwen3:14b", False),
        ("cloudy:7b", False),
    ],
)
def test_is_cloud_model(model: str, cloud: bool) -> None:
    assert is_cloud_model(model) is cloud


@pytest.mark.parametrize(
    ("tier", "iterations", "nudges", "mid_chain"),
    [
        (ModelTier.HIGH, 25, 2, 2),
        (ModelTier.STANDARD, 15, 4, 3),
        (ModelTier.LIMITED, 8, 5, 4),
    ],
)
def test_default_caps_table(tier: ModelTier, iterations: int, nudges: int, mid_chain: int) -> None:
    assert DEFAULT_TIER_CAPS[tier] == TierCaps(iterations, nudges, mid_chain)


def test_caps_for_model_uses_the_given_table() -> None:
    table = {**DEFAULT_TIER_CAPS, ModelTier.LIMITED: TierCaps(3, 1, 1)}
    assert caps_for_model("qwen3:8b", table) == TierCaps(3, 1, 1)
    assert caps_for_model("claude-opus") == TierCaps(25, 2, 2)
