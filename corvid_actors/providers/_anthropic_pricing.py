"""Anthropic pricing: a model's price row, what a reply's usage costs, and the
longest-prefix lookup by which the config tables (prices, context windows) are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from corvid_actors.providers.base import Usage

_TOKENS_PER_PRICE_UNIT = 1_000_000


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens, by kind of token (a row of the config price table)."""

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float = 0.0
    cache_write_per_mtok: float = 0.0


def cost_usd(usage: Usage, price: ModelPrice | None) -> float:
    """What ``usage`` costs at ``price`` (0.0 when the model has no price)."""
    if price is None:
        return 0.0
    return (
        usage.input_tokens * price.input_per_mtok
        + usage.output_tokens * price.output_per_mtok
        + usage.cache_read_tokens * price.cache_read_per_mtok
        + usage.cache_creation_tokens * price.cache_write_per_mtok
    ) / _TOKENS_PER_PRICE_UNIT


def lookup_by_model(table: Mapping[str, Any], model: str) -> Any | None:
    """``table[model]``, else the entry of the longest key that prefixes ``model``.

    So a table keyed ``claude-sonnet-4-5`` also prices ``claude-sonnet-4-5-20250929``.
    """
    if model in table:
        return table[model]
    keys = [k for k in table if model.startswith(k)]
    return table[max(keys, key=len)] if keys else None
