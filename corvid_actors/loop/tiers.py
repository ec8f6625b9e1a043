"""Model tiers: how much rope the direct loop gives a model, judged by its name.

Large hosted models follow instructions and stop when done; small local models loop,
stall and need more nudging. The tier, inferred from the model name, selects caps
(iterations and nudge budgets) that override the loop's defaults.

Mapping (from the original's agent tiers):

* names containing ``claude``, ``anthropic``, ``openai`` or ``gpt-4`` → high;
* known capable families (llama, qwen2, qwen3, mistral, command-r, deepseek, minimax,
  kimi): cloud → high, under 20 B parameters → limited, otherwise standard;
* known weaker families (phi, gemma, hermes, nemotron, glm, devstral, gemini) and
  unknown names: cloud or 30 B and up → standard, otherwise limited.

"Cloud" means the name contains ``:cloud`` or ends in ``-cloud``. A size that cannot
be read from the name counts as "large enough" for a capable family and "small" for
the others. Weaker families are matched first, because fine-tunes carry their base
model's name too ("llama-3.1-nemotron").
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


class ModelTier(enum.StrEnum):
    """How capable a model is at agentic tool use."""

    HIGH = "high"
    STANDARD = "standard"
    LIMITED = "limited"


@dataclass(frozen=True)
class TierCaps:
    """The loop limits for one tier."""

    max_tool_iterations: int
    max_nudges: int
    max_mid_chain_nudges: int


#: the original's tier table (iterations, nudges, mid-chain nudges)
DEFAULT_TIER_CAPS: Mapping[ModelTier, TierCaps] = MappingProxyType(
    {
        ModelTier.HIGH: TierCaps(max_tool_iterations=25, max_nudges=2, max_mid_chain_nudges=2),
        ModelTier.STANDARD: TierCaps(max_tool_iterations=15, max_nudges=4, max_mid_chain_nudges=3),
        ModelTier.LIMITED: TierCaps(max_tool_iterations=8, max_nudges=5, max_mid_chain_nudges=4),
    }
)


@dataclass(frozen=True)
class TierRules:
    """The name patterns and size thresholds of :func:`tier_for_model`."""

    high_markers: tuple[str, ...] = ("claude", "anthropic", "openai", "gpt-4")
    capable_families: tuple[str, ...] = (
        "llama",
        "qwen2",
        "qwen3",
        "mistral",
        "command-r",
        "deepseek",
        "minimax",
        "kimi",
    )
    weaker_families: tuple[str, ...] = (
        "phi",
        "gemma",
        "hermes",
        "nemotron",
        "glm",
        "devstral",
        "gemini",
    )
    #: a capable family under this many billion parameters is limited
    capable_limited_below_b: float = 20.0
    #: a weaker or unknown model from this many billion parameters is standard
    weaker_standard_from_b: float = 30.0
    cloud_markers: tuple[str, ...] = (":cloud",)
    cloud_suffixes: tuple[str, ...] = ("-cloud",)


DEFAULT_TIER_RULES = TierRules()

# "8x7b" (mixture of experts) before plain "14b" / "3.8b"; the size must not be glued
# to a preceding word character, so "qwen3" never reads as a size.
_MOE_SIZE = re.compile(r"(?<![\w.])(\d+)x(\d+(?:\.\d+)?)b\b")
_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)b\b")


def parameter_size_b(model: str) -> float | None:
    """Billions of parameters as written in the model name (``qwen3:14b`` → 14.0)."""
    name = model.lower()
    moe = _MOE_SIZE.search(name)
    if moe:
        return float(moe.group(1)) * float(moe.group(2))
    plain = _SIZE.search(name)
    return float(plain.group(1)) if plain else None


def is_cloud_model(model: str, rules: TierRules = DEFAULT_TIER_RULES) -> bool:
    """Whether the name marks a hosted ("cloud") variant."""
    name = model.lower()
    return any(marker in name for marker in rules.cloud_markers) or name.endswith(
        rules.cloud_suffixes
    )


def tier_for_model(model: str, rules: TierRules = DEFAULT_TIER_RULES) -> ModelTier:
    """The tier of ``model`` by the mapping in the module docstring."""
    name = model.lower()
    if any(marker in name for marker in rules.high_markers):
        return ModelTier.HIGH
    cloud = is_cloud_model(name, rules)
    size = parameter_size_b(name)
    weaker = any(family in name for family in rules.weaker_families)
    capable = not weaker and any(family in name for family in rules.capable_families)
    if capable:
        if cloud:
            return ModelTier.HIGH
        if size is not None and size < rules.capable_limited_below_b:
            return ModelTier.LIMITED
        return ModelTier.STANDARD
    if cloud or (size is not None and size >= rules.weaker_standard_from_b):
        return ModelTier.STANDARD
    return ModelTier.LIMITED


def caps_for_model(
    model: str,
    caps: Mapping[ModelTier, TierCaps] = DEFAULT_TIER_CAPS,
    rules: TierRules = DEFAULT_TIER_RULES,
) -> TierCaps:
    """The caps of ``model``'s tier from the ``caps`` table."""
    return caps[tier_for_model(model, rules)]
