"""Typed configuration: ``config/default.toml`` < a user file < environment variables
(:func:`load_config`, :class:`Config`).
"""

from __future__ import annotations

from corvid_actors.config.loader import (
    ENV_OVERRIDES,
    Config,
    CorvidToolsConfig,
    DaemonConfig,
    from_dict,
    load_config,
    to_dict,
)

__all__ = [
    "Config",
    "CorvidToolsConfig",
    "DaemonConfig",
    "ENV_OVERRIDES",
    "from_dict",
    "load_config",
    "to_dict",
]
