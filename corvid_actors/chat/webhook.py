"""An HTTP webhook transport: the shape most chat platforms use, served by Starlette on uvicorn.

Incoming: the platform POSTs each message to ``http://<host>:<port><path>`` as JSON
``{"channel": "...", "participant": "...", "text": "...", "id": "optional message id"}``
with a ``Content-Length`` (chunked bodies are refused). The answer comes after the
bridge has dealt with the message (persisted it, or answered a command):
``202 {"accepted": true, "outcome": "delivered"}``. Errors, each a JSON
``{"error": "..."}``: ``400`` (bad JSON or fields, missing/negative/non-numeric
``Content-Length``), ``401`` (missing, malformed, wrong or expired signature), ``404``
(other path), ``408`` (the request did not arrive within ``read_timeout_s``), ``409``
(a replay: this signature was already accepted), ``413`` (body too large), ``429`` (too
many connections at once: over ``max_connections`` in all, or over
``max_connections_per_client`` from one client address), ``503`` (the bot is shutting
down, or the replay store is unreachable), ``500`` (anything else). ``GET /healthz``
answers ``200``.

Signatures (with a ``secret``), in the style of Stripe and Slack::

    X-Corvid-Signature: t=1767225600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd

``v1`` is the hex HMAC-SHA256, keyed with the secret, of ``"<t>."`` followed by the raw
body; ``t`` is the sender's Unix time in seconds. A request is accepted when a ``v1``
matches (several may be sent, e.g. while rotating secrets), ``t`` is within
``signature_tolerance_s`` of now, and the signature was not accepted before: accepted
signatures are kept in the database's replay store until their timestamp leaves the
window, so a captured request cannot be replayed — not even after a restart. Everything
that can be checked without the body (the length, the path, the header, the timestamp)
is checked before the body is read. The old body-only ``sha256=<hex>`` header is
accepted only with ``allow_legacy_signatures`` (a warning is logged): it has no
timestamp, so only the replay window protects it.

Outgoing: each reply is POSTed to ``callback_url`` as JSON ``{"channel", "participant",
"text", "kind", "session_id"}``, signed the same way; a non-2xx answer or a network
error raises :class:`~corvid_actors.chat.transport.TransportError` (the bridge logs and
counts it).

Without a secret nothing is signed or checked (a warning is logged): anyone who can reach
the port can post as any participant. The server binds 127.0.0.1 by default: put a
TLS-terminating proxy in front of it to expose it.

The ASGI application is in :mod:`corvid_actors.chat.webhook_asgi` (:meth:`WebhookTransport.asgi_app`:
mount it on a host's own Starlette/FastAPI app or on the daemon's HTTP listener, with
``serve=False``); the transport's own server (uvicorn, with the connection caps and the
whole-request deadline) in :mod:`corvid_actors.chat.webhook_server`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from loguru import logger

from corvid_actors.chat.signatures import (
    DEFAULT_TOLERANCE_S,
    SIGNATURE_HEADER,
    SignatureError,
    Verified,
    check_timestamp,
    sign,
    sign_legacy,
    verify,
)
from corvid_actors.chat.transport import (
    IncomingMessage,
    MessageHandler,
    OutgoingMessage,
    TransportError,
    is_storable_text,
)
from corvid_actors.chat.webhook_asgi import create_webhook_app
from corvid_actors.chat.webhook_server import WebhookServer
from corvid_actors.clock import Clock, RealClock
from corvid_actors.db.replays import MemoryReplayStore
from corvid_actors.errors import RuntimeStoppedError, StoreError

DEFAULT_PATH = "/messages"
#: largest accepted request body (a chat message with room to spare)
DEFAULT_MAX_BODY_BYTES = 64 * 1024
#: seconds a callback POST may take before it counts as failed
DEFAULT_SEND_TIMEOUT_S = 10.0
#: the whole request must arrive within this many seconds
DEFAULT_READ_TIMEOUT_S = 10.0
#: connections served at once
DEFAULT_MAX_CONNECTIONS = 64
#: connections served at once from one client address: a quarter of the global cap, so
#: one client's idle flood leaves room for the others
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 16


class ReplayGuard(Protocol):
    """:class:`~corvid_actors.db.replays.ReplayStore`'s contract."""

    durable: bool

    def first_use(self, key: str, *, now: datetime, expires_at: datetime) -> bool: ...

    def forget(self, key: str) -> None: ...


class WebhookTransport:
    """See the module docstring. ``port=0`` picks a free port (read :attr:`url`).

    ``max_connections`` bounds the connections served at once, ``max_connections_per_client``
    those from one client address (behind a proxy every request comes from the proxy's
    address: raise it to ``max_connections`` there, and let the proxy limit its clients).

    ``replays`` remembers accepted signatures; by default the bridge binds the runtime's
    store to it (:meth:`bind_runtime`), else it is in memory (not durable, with a warning).
    ``clock`` tells the time signatures are checked against (the runtime's, once bound).
    ``serve=False``: :meth:`start` serves nothing; a host serves :meth:`asgi_app` itself.
    """

    name = "webhook"

    def __init__(self, callback_url: str, *, host: str = "127.0.0.1", port: int = 0, path: str = DEFAULT_PATH,
                 secret: str = "", send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, signature_tolerance_s: float = DEFAULT_TOLERANCE_S,
                 allow_legacy_signatures: bool = False, read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
                 replays: ReplayGuard | None = None, clock: Clock | None = None, serve: bool = True) -> None:
        if max_connections < 1 or max_connections_per_client < 1:
            raise ValueError(f"max_connections ({max_connections}) and max_connections_per_client "
                             f"({max_connections_per_client}) must be at least 1")
        self.callback_url = callback_url
        self.host = host
        self.port = port
        self.path = path
        self.secret = secret
        self.send_timeout_s = send_timeout_s
        self.max_body_bytes = max_body_bytes
        self.signature_tolerance_s = signature_tolerance_s
        self.allow_legacy_signatures = allow_legacy_signatures
        self.read_timeout_s = read_timeout_s
        self.max_connections = max_connections
        self.max_connections_per_client = max_connections_per_client
        self.replays = replays
        self.clock = clock
        #: deadlines of socket reads: real time even while a simulation freezes the clock
        self._io_clock = RealClock()
        self._handler: MessageHandler | None = None
        self.serve = serve
        self._server: WebhookServer | None = None
        self._app: Any = None

    @classmethod
    def from_config(cls, callback_url: str, config: Any, **kwargs: Any) -> WebhookTransport:
        """A transport with the ``[webhook]`` settings of ``config`` (``kwargs`` win)."""
        w = config.webhook
        settings = {"signature_tolerance_s": w.signature_tolerance_s,
                    "allow_legacy_signatures": w.allow_legacy_signatures, "max_body_bytes": w.max_body_bytes,
                    "read_timeout_s": w.read_timeout_s, "max_connections": w.max_connections,
                    "max_connections_per_client": w.max_connections_per_client,
                    "send_timeout_s": w.send_timeout_s}
        return cls(callback_url, **{**settings, **kwargs})

    def bind_runtime(self, runtime: Any) -> None:
        """Called by the bridge before :meth:`start`: the runtime's store keeps the replay
        window (durable) and its clock tells the time, unless given explicitly."""
        if self.replays is None and callable(getattr(runtime, "replay_store", None)):
            self.replays = runtime.replay_store()
        if self.clock is None:
            self.clock = getattr(runtime, "clock", None)

    @property
    def url(self) -> str:
        """Where the platform POSTs messages."""
        if self._server is None:
            raise RuntimeError("the webhook transport is not serving (not started, or serve=False)")
        return f"http://{self.host}:{self._server.server_address[1]}{self.path}"

    def start(self, handler: MessageHandler) -> None:
        """Serve ``POST`` requests on ``host:port`` (a thread of its own); warns when no secret is set
        or the replay store is in memory."""
        if self.clock is None:
            self.clock = self._io_clock
        if self.replays is None:
            self.replays = MemoryReplayStore()
        if not self.secret:
            logger.warning("webhook: no secret configured: requests are not authenticated, anyone who can reach "
                           "{}:{} can post as any participant", self.host, self.port)
        else:
            if not self.replays.durable:
                logger.warning("webhook: the replay store is in memory: a restart forgets accepted signatures "
                               "(bind a runtime's store for a durable one)")
            if self.allow_legacy_signatures:
                logger.warning("webhook: legacy body-only signatures (sha256=) are accepted: they carry no "
                               "timestamp; upgrade the platform to t=…,v1=… and turn allow_legacy_signatures off")
        self._handler = handler
        if not self.serve:
            return  # a host serves asgi_app() on its own server
        server = WebhookServer(self.asgi_app(), self.host, self.port, read_timeout_s=self.read_timeout_s,
                               max_connections=self.max_connections,
                               max_connections_per_client=self.max_connections_per_client)
        self._server = server
        server.start()

    def asgi_app(self) -> Any:
        """The webhook as a Starlette (ASGI) application: ``POST <path>`` and ``GET /healthz``.
        A host with its own ASGI server mounts it (``Mount("/webhook", transport.asgi_app())``,
        or ``HttpListener(..., mounts={"/webhook": ...})``) and passes ``serve=False``; the
        signature checks, replay window, body limit and body deadline come with it, the
        connection caps are the host server's. One app per transport (built on first use)."""
        if self._app is None:
            self._app = create_webhook_app(self)
        return self._app

    def stop(self) -> None:
        """Stop the server and close its socket."""
        server, self._server = self._server, None
        self._handler = None
        if server is not None:
            server.stop()

    def send(self, message: OutgoingMessage) -> None:
        """POST the message to the callback URL, signed when a secret is set; a refusal or an
        unreachable callback raises :class:`TransportError`."""
        body = json.dumps({"channel": message.channel, "participant": message.participant, "text": message.text,
                           "kind": message.kind, "session_id": message.session_id}).encode()
        headers = {"Content-Type": "application/json"}
        if self.secret:
            headers[SIGNATURE_HEADER] = sign(self.secret, body, int(self._now()))
        request = urllib.request.Request(self.callback_url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.send_timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            raise TransportError(f"callback {self.callback_url} answered HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise TransportError(f"callback {self.callback_url} unreachable: {exc}") from exc

    # --- one request (on a server thread) ---------------------------------------------------

    def _now(self) -> float:
        return (self.clock or self._io_clock).now().timestamp()

    def _precheck(self, signature: str | None) -> None:
        """Before the body is read: refuse what the header alone condemns (raises SignatureError)."""
        if not self.secret:
            return
        check_timestamp(signature, now=self._now(), tolerance_s=self.signature_tolerance_s,
                        allow_legacy=self.allow_legacy_signatures)

    def _incoming(self, body: bytes, signature: str | None) -> tuple[int, dict[str, Any]]:
        verified: Verified | None = None
        if self.secret:
            try:
                verified = verify(self.secret, body, signature, now=self._now(),
                                  tolerance_s=self.signature_tolerance_s, allow_legacy=self.allow_legacy_signatures)
            except SignatureError as exc:
                return 401, {"error": str(exc)}
        try:
            data = json.loads(body or b"null")
        except (ValueError, RecursionError):
            return 400, {"error": "the body is not JSON"}
        if not isinstance(data, dict):
            return 400, {"error": "the body must be a JSON object"}
        fields = {k: data.get(k) for k in ("channel", "participant", "text")}
        bad = [k for k, v in fields.items() if not isinstance(v, str) or (k != "text" and not v)
               or not is_storable_text(v)]
        message_id = data.get("id", "")
        if bad or not _valid_id(message_id):
            return 400, {"error": f"need string fields channel, participant, text of valid Unicode and an "
                                  f"optional string or integer id (bad: {', '.join(bad) or 'id'})"}
        handler = self._handler
        if handler is None:
            return 503, {"error": "the bot is stopping"}
        if verified is not None:
            status = self._first_use(verified)
            if status is not None:
                return status
        try:
            # every field was checked to be a string above
            channel, participant, text = (cast(str, fields[k]) for k in ("channel", "participant", "text"))
            outcome = handler(IncomingMessage(channel, participant, text, str(message_id)))
        except ValueError as exc:
            return 400, {"error": str(exc)}
        except RuntimeStoppedError:
            self._forget(verified)  # not handled: the platform's retry may use the signature again
            return 503, {"error": "the bot is shutting down; retry later"}
        except StoreError as exc:
            self._forget(verified)
            logger.warning("webhook: the database is unavailable ({}); the platform should retry", exc)
            return 503, {"error": "the bot's database is unavailable; retry later"}
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            self._forget(verified)
            logger.opt(exception=True).error("webhook: handling a message failed")
            return 500, {"error": f"{type(exc).__name__}: {exc}"}
        return 202, {"accepted": True, "outcome": outcome}

    def _first_use(self, verified: Verified) -> tuple[int, dict[str, Any]] | None:
        assert self.replays is not None
        now = (self.clock or self._io_clock).now()
        expires = now + timedelta(seconds=max(0.0, verified.expires - now.timestamp()) + 1)
        try:
            first = self.replays.first_use(verified.key, now=now, expires_at=expires)
        except (StoreError, OSError) as exc:
            logger.warning("webhook: the replay store is unavailable ({}); refusing the request", exc)
            return 503, {"error": "the replay store is unavailable; retry later"}
        if not first:
            logger.warning("webhook: a replayed signature was refused")
            return 409, {"error": "replayed request: this signature was already accepted"}
        return None

    def _forget(self, verified: Verified | None) -> None:
        if verified is None or self.replays is None:
            return
        try:
            self.replays.forget(verified.key)
        except (StoreError, OSError):
            logger.warning("webhook: could not release a signature in the replay store")



def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) < 2**63
    return isinstance(value, str) and len(value) <= 200 and is_storable_text(value)


__all__ = ["DEFAULT_TOLERANCE_S", "SIGNATURE_HEADER", "ReplayGuard", "SignatureError", "Verified", "WebhookTransport",
           "check_timestamp", "sign", "sign_legacy", "verify"]
