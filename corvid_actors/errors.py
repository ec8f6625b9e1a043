"""The runtime's error types. Messages say what was wrong and what to do about it."""

from __future__ import annotations


class CorvidError(Exception):
    """Base of every error corvid-actors raises on purpose."""


class ConfigError(CorvidError):
    """A configuration value is missing or invalid; the message names the key."""


class StoreError(CorvidError):
    """The database could not be opened, migrated or written."""


class NotFoundError(CorvidError):
    """A session, agent or project does not exist."""


class RuntimeStoppedError(CorvidError):
    """The runtime is shut down (or shutting down) and refuses new work."""


class ConflictError(CorvidError):
    """What exists differs from what was asked for, and nothing was changed."""


class SettleTimeout(CorvidError):
    """``Runtime.settle(timeout_s=…)`` gave up: some actor or worker is still busy."""


class InvalidContentError(CorvidError, ValueError):
    """A message's content is neither a string nor valid content blocks (text, image)."""


class CreditAmountError(CorvidError, ValueError):
    """A credit amount is not a positive whole number within the ledger's bounds, or would
    push a balance past its cap. A ValueError too, so callers that catch that keep working."""
