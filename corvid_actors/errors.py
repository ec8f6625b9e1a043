"""The runtime's error types. Messages say what was wrong and what to do about it.

Every error corvid-actors raises on purpose is a :class:`CorvidError`; catching it catches
all of them, and nothing else (bugs stay loud). The tree, in one place:

- :class:`CorvidError`
  - :class:`ConfigError` — a configuration value is missing or invalid.
  - :class:`StoreError` — the database could not be opened, migrated, read or written.
    - :class:`StoreUnavailableError` — the database cannot be reached at all (PostgreSQL
      down or restarting, the SQLite file deleted or made read-only). Nothing was
      written; sends raise it and are not acknowledged. ``admin health`` says
      ``degraded`` with the same reason until the store is back.
    - :class:`FencedWrite` — a session incarnation's write was refused by the database
      because another daemon has claimed the session since (a newer lease epoch).
    - :class:`SchemaTooNew` — the database was migrated by a newer release, further than
      this one can run on (migrated by more than one newer release, or a breaking migration).
  - :class:`NotFoundError` — a session, agent or project does not exist.
  - :class:`RuntimeStoppedError` — the runtime is shut down (or failed: a core actor died).
  - :class:`SettleTimeout` — ``Runtime.settle(timeout_s=…)`` gave up.
  - :class:`InvalidContentError` (also a ``ValueError``) — bad message content.
  - :class:`CreditAmountError` (also a ``ValueError``) — a credit amount out of range.
  - :class:`AgentSettingError` (also a ``ValueError``) — an agent setting out of range.
  - :class:`BudgetExceededError` — a turn not started: a spending cap is reached.
  - ``ProviderError`` (:mod:`corvid_actors.providers.base`) — a classified failure of a
    model provider (outage, rate limit, bad request …); its ``kind`` says which.
  - :class:`AdminError` — an admin request refused, with one of the error codes below
    (the AdminActor raises it; the admin socket, :mod:`corvid_actors.daemon.protocol`,
    sends it as an error reply).
  - :class:`CommandTimeout` — a command forwarded to another daemon of a cluster got no
    answer in time (:mod:`corvid_actors.db.pg_bus`); ``taken`` says whether it may still run.
  - :class:`CommandFailed` — the other daemon ran a forwarded command and it failed.
"""

from __future__ import annotations

from typing import Any


class CorvidError(Exception):
    """Base of every error corvid-actors raises on purpose."""


class ConfigError(CorvidError):
    """A configuration value is missing or invalid; the message names the key."""


class StoreError(CorvidError):
    """The database could not be opened, migrated or written."""


class StoreUnavailableError(StoreError):
    """The database cannot be reached (connection lost, server down, SQLite file gone or
    read-only). The message starts with ``store unavailable:`` and says why; the operation
    was not performed (or, for a commit cut off midway, may not have been: the message says so)."""


class FencedWrite(StoreError):
    """A write carrying a session's lease epoch was refused: another owner has claimed the
    session since (its epoch is newer), so this incarnation is stale and must stop. Nothing
    was written. Raised for the database's refusal (SQLSTATE :attr:`SQLSTATE`, raised by the
    fencing triggers of :mod:`corvid_actors.db.fencing`) and for a daemon that was declared
    gone. Writes that carry no epoch (one daemon, SQLite) are never refused."""

    #: the SQLSTATE of the fencing triggers' refusal ("CV": a class PostgreSQL leaves free)
    SQLSTATE = "CVF01"

    @classmethod
    def from_database_error(cls, exc: BaseException) -> FencedWrite | None:
        """The FencedWrite behind a driver or peewee error ``exc`` (its SQLSTATE, looked up
        along ``orig``/``__cause__``/``__context__``), or None if it is another error."""
        seen: set[int] = set()
        todo: list[BaseException | None] = [exc]
        while todo:
            err = todo.pop()
            if err is None or id(err) in seen:
                continue
            seen.add(id(err))
            if getattr(err, "pgcode", None) == cls.SQLSTATE:
                first = str(err).strip().splitlines()
                return cls(first[0] if first else "fenced: a newer owner has claimed the session")
            todo += [getattr(err, "orig", None), err.__cause__, err.__context__]
        return None


class SchemaTooNew(StoreError):
    """The database's schema is newer than this code can run on: more than one version
    ahead, or the next version is a breaking migration (:mod:`corvid_actors.db.migrations`).
    Nothing was changed; upgrade corvid-actors to the release that migrated the database."""


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


class AgentSettingError(CorvidError, ValueError):
    """An agent setting given to create_agent / update_agent is out of range (the message
    names it: a conversation_mode, an allowlist that is not a list of ids, a negative cap)."""


class SessionBusyError(CorvidError):
    """A user message was refused, not stored: its session is still answering the previous
    one and its agent's ``double_texting`` policy is ``reject`` (see
    :mod:`corvid_actors.core.double_texting`). Send it again when the turn's ``result`` came."""


class BudgetExceededError(CorvidError):
    """A turn was not started: its session, or its agent over all its sessions, has spent
    its cap (``max_budget_usd`` / ``max_total_budget_usd``). The session got a
    ``session_error`` of type ``budget_exceeded`` with the same message; ``spend`` is the
    :class:`~corvid_actors.policy.access.Spend` that says which cap, what was spent and the caps."""

    def __init__(self, message: str, spend: Any = None) -> None:
        super().__init__(message)
        self.spend = spend


#: error codes an admin reply may carry (:class:`AdminError`'s ``code``)
BAD_REQUEST = "bad_request"
UNKNOWN_COMMAND = "unknown_command"
UNAUTHORIZED = "unauthorized"
#: a valid token whose scope does not allow the request (a ``read`` token asking to change something)
FORBIDDEN = "forbidden"
TOO_LARGE = "too_large"
NOT_FOUND = "not_found"
CONFLICT = "conflict"
UNAVAILABLE = "unavailable"
SHUTTING_DOWN = "shutting_down"
BUSY = "busy"
TIMEOUT = "timeout"
INTERNAL = "internal"


class AdminError(CorvidError):
    """An admin request failed; ``code`` is one of this module's admin error codes
    (``BAD_REQUEST`` … ``INTERNAL``), ``message`` says what was wrong."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def admin_code(exc: CorvidError) -> str:
    """The admin error code ``exc`` is answered with: an :class:`AdminError`'s own code;
    ``UNAVAILABLE`` for a store that cannot be reached — the same code whichever command
    found it down, on whichever daemon; ``BAD_REQUEST`` for the other errors the runtime
    raises on purpose (a request it cannot carry out as asked)."""
    if isinstance(exc, AdminError):
        return exc.code
    if isinstance(exc, StoreUnavailableError):
        return UNAVAILABLE
    return BAD_REQUEST


class CommandTimeout(CorvidError):
    """:meth:`corvid_actors.db.pg_bus.PgBus.await_result` gave up. ``taken`` False: the target never took the command
    and it was withdrawn (it will not run); True: the target took it and may still run it
    to its end (its result is then discarded)."""

    def __init__(self, message: str, *, taken: bool) -> None:
        super().__init__(message)
        self.taken = taken


class CommandFailed(CorvidError):
    """The target ran the forwarded command and it failed; the message carries the target's."""
