"""Bearer tokens for every request (issue 39 item 3).

``Authorization: Bearer <secret>``: the secret's SHA-256 is compared with every active
token's stored hash by :func:`hmac.compare_digest` (constant time, whichever token
matches or none), so neither the database lookup nor the comparison tells an attacker
how close a guess was. No header or an unknown or revoked token → 401 ``unauthorized``;
a ``read`` token on a request that changes something → 403 ``forbidden``.

The CSRF story: the token travels only in the ``Authorization`` header, never in a
cookie, and the API sets no cookie, so a page on another site cannot make a browser send
it (a cross-site form or image carries no such header, and a script's cross-origin
request with one needs a CORS preflight this server never grants).

The active tokens are read from the store on each request (a handful of rows, so a
revoked token stops working at once); while the store cannot be reached, the last list
read is used, so operators keep their view of a daemon whose database is down.
"""

from __future__ import annotations

import hmac
import ipaddress
import threading
from dataclasses import dataclass

from loguru import logger

from corvid_actors.clock import Clock
from corvid_actors.db.api_tokens import ActiveToken, ApiTokenStore, token_hash
from corvid_actors.errors import FORBIDDEN, UNAUTHORIZED, AdminError, StoreUnavailableError

#: the scope that may change things; ``read`` may only look
OPERATE = "operate"
#: a token's last use is written at most this often (seconds): not one write per request
TOUCH_INTERVAL_S = 60.0


@dataclass(frozen=True)
class Caller:
    """Who made a request: the token's name and scope."""

    name: str
    scope: str

    def require(self, mutating: bool) -> None:
        """Raise ``forbidden`` (403) when a request that changes something comes with a
        token that may only read."""
        if mutating and self.scope != OPERATE:
            raise AdminError(FORBIDDEN, f"the token {self.name!r} has scope {self.scope!r}: "
                                        "changing things needs an 'operate' token")


class TokenCheck:
    """Checks ``Authorization`` headers against the stored tokens. Thread-safe: runs on the
    listener's worker threads."""

    def __init__(self, tokens: ApiTokenStore, clock: Clock) -> None:
        self._tokens = tokens
        self._clock = clock
        self._lock = threading.Lock()
        self._last_known: list[ActiveToken] = []
        self._touched: dict[str, float] = {}

    def caller(self, authorization: str | None) -> Caller:
        """The caller of a request with this ``Authorization`` header; raises
        ``AdminError`` ``unauthorized`` (401). Its scope is checked by :meth:`Caller.require`."""
        secret = _bearer(authorization)
        if secret is None:
            raise AdminError(UNAUTHORIZED, "an API token is required: send 'Authorization: Bearer <token>' "
                                           "(create one with `corvid-actors admin token create`)")
        digest = token_hash(secret)
        found: ActiveToken | None = None
        for token in self._active():
            # every active token is compared, a match or not: the time does not say which matched
            if hmac.compare_digest(digest.encode(), token.token_hash.encode()) and found is None:
                found = token
        if found is None:
            raise AdminError(UNAUTHORIZED, "the API token is not valid (unknown or revoked)")
        self._touch(found.name)
        return Caller(found.name, found.scope)

    def _active(self) -> list[ActiveToken]:
        try:
            active = self._tokens.active()
        except StoreUnavailableError:
            with self._lock:
                return list(self._last_known)
        with self._lock:
            self._last_known = active
        return active

    def _touch(self, name: str) -> None:
        now = self._clock.monotonic()
        with self._lock:
            last = self._touched.get(name)
            if last is not None and now - last < TOUCH_INTERVAL_S:
                return
            self._touched[name] = now
        try:
            self._tokens.touch(name, self._clock.now())
        except StoreUnavailableError as exc:  # the request goes on; the next use writes it
            logger.debug("API token {}: last use not recorded ({})", name, exc)


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    return value if scheme.lower() == "bearer" and value else None


def is_loopback(host: str) -> bool:
    """``host`` names only this machine (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere
