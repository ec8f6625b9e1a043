"""The HTTP API's bearer tokens (``api_tokens``): created, listed, revoked, and the active
ones read for each request's check (:mod:`corvid_actors.http.auth`).

A token is ``corvid_`` and 43 URL-safe characters (256 random bits); only its SHA-256 is
stored, so a copy of the database lets no one in. The secret is shown once, when it is
created. A revoked token keeps its row (``revoked_at``), so its name is not reused and the
log lines that name it stay readable.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from corvid_actors.db.naive_utc import naive
from corvid_actors.db.store import Store
from corvid_actors.db.store_base import store_op
from corvid_actors.errors import ConflictError, NotFoundError

#: what a token may do: ``read`` only GETs, ``operate`` everything
TOKEN_SCOPES = ("read", "operate")
#: every secret starts so (a secret scanner can find a leaked one)
TOKEN_PREFIX = "corvid_"
#: random bytes in a secret
TOKEN_BYTES = 32


def token_hash(secret: str) -> str:
    """The stored form of ``secret``: SHA-256, hex (a 256-bit random secret needs no slow hash)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ActiveToken:
    """A token that is not revoked: what a request's check compares against."""

    name: str
    scope: str
    token_hash: str


class ApiTokenStore:
    """The token rows of ``store``. Thread-safe; each method one transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.m = store.m

    @store_op
    def create(self, name: str, scope: str, *, now: datetime | None = None) -> str:
        """A new token named ``name``; returns its secret (shown once, never stored).
        Raises ConflictError when the name is taken (revoked tokens keep theirs)."""
        if scope not in TOKEN_SCOPES:
            raise ValueError(f"scope must be one of {', '.join(TOKEN_SCOPES)}, not {scope!r}")
        secret = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
        T = self.m.ApiToken
        with self.store.transaction():
            if T.get_or_none(T.name == name) is not None:
                raise ConflictError(f"a token named {name!r} exists already (revoked or not): choose another name")
            row = T(name=name, scope=scope, token_hash=token_hash(secret))
            if now is not None:
                row.created_at = naive(now)
            row.save(force_insert=True)
        return secret

    @store_op
    def list_tokens(self) -> list[dict[str, Any]]:
        """Every token, oldest first: name, scope, created, last used, revoked (no hash)."""
        T = self.m.ApiToken
        with self.store.transaction():
            rows = list(T.select().order_by(T.created_at, T.name))
        return [{"name": r.name, "scope": r.scope, "created_at": _iso(r.created_at),
                 "last_used_at": _iso(r.last_used_at), "revoked_at": _iso(r.revoked_at)} for r in rows]

    @store_op
    def revoke(self, name: str, *, now: datetime) -> bool:
        """Revoke ``name`` from now on; False when it was revoked already. NotFoundError
        when there is no such token."""
        T = self.m.ApiToken
        with self.store.transaction():
            row = T.get_or_none(T.name == name)
            if row is None:
                raise NotFoundError(f"no API token named {name!r} (`admin token list` shows them)")
            if row.revoked_at is not None:
                return False
            T.update(revoked_at=naive(now)).where(T.name == name).execute()
            return True

    @store_op
    def active(self) -> list[ActiveToken]:
        """The tokens not revoked (a handful: every request compares against each)."""
        T = self.m.ApiToken
        with self.store.transaction():
            rows = T.select(T.name, T.scope, T.token_hash).where(T.revoked_at.is_null()).tuples()
            return [ActiveToken(name, scope, digest) for name, scope, digest in rows]

    @store_op
    def touch(self, name: str, now: datetime) -> None:
        """Record that ``name`` was used at ``now`` (the caller throttles how often)."""
        T = self.m.ApiToken
        with self.store.transaction():
            T.update(last_used_at=naive(now)).where(T.name == name).execute()

    def count_active(self) -> int:
        """How many tokens are not revoked."""
        return len(self.active())


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC).isoformat(timespec="seconds") if isinstance(moment, datetime) else str(moment)

