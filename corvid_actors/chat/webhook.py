"""An HTTP webhook transport: the shape most chat platforms use. Stdlib only.

Incoming: the platform POSTs each message to ``http://<host>:<port><path>`` as JSON
``{"channel": "...", "participant": "...", "text": "...", "id": "optional message id"}``.
The answer comes after the bridge has dealt with the message (persisted it, or answered
a command): ``202 {"accepted": true, "outcome": "delivered"}``. Errors: ``400`` (bad
JSON or fields), ``401`` (bad signature), ``404`` (other path), ``413`` (body too
large), ``503`` (the bot is shutting down), ``500`` (anything else). ``GET /healthz``
answers ``200``.

Outgoing: each reply is POSTed to ``callback_url`` as JSON ``{"channel", "participant",
"text", "kind", "session_id"}``; a non-2xx answer or a network error raises
:class:`~corvid_actors.chat.transport.TransportError` (the bridge logs and counts it).

With a ``secret``, both directions carry ``X-Corvid-Signature: sha256=<hex HMAC-SHA256 of
the body>``, and incoming requests without a valid one are refused. The server binds
127.0.0.1 by default: put a TLS-terminating proxy in front of it to expose it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loguru import logger

from corvid_actors.chat.transport import (
    IncomingMessage,
    MessageHandler,
    OutgoingMessage,
    TransportError,
)
from corvid_actors.errors import RuntimeStoppedError

SIGNATURE_HEADER = "X-Corvid-Signature"
DEFAULT_PATH = "/messages"
#: largest accepted request body (a chat message with room to spare)
DEFAULT_MAX_BODY_BYTES = 64 * 1024
#: seconds a callback POST may take before it counts as failed
DEFAULT_SEND_TIMEOUT_S = 10.0
#: how often the server loop checks for stop() (bounds how long stop() takes)
_SERVE_POLL_S = 0.05


def sign(secret: str, body: bytes) -> str:
    """The signature header value for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str | None) -> bool:
    return header is not None and hmac.compare_digest(sign(secret, body), header)


class WebhookTransport:
    """See the module docstring. ``port=0`` picks a free port (read :attr:`url`)."""

    name = "webhook"

    def __init__(self, callback_url: str, *, host: str = "127.0.0.1", port: int = 0, path: str = DEFAULT_PATH,
                 secret: str = "", send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.callback_url = callback_url
        self.host = host
        self.port = port
        self.path = path
        self.secret = secret
        self.send_timeout_s = send_timeout_s
        self.max_body_bytes = max_body_bytes
        self._handler: MessageHandler | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where the platform POSTs messages."""
        if self._server is None:
            raise RuntimeError("the webhook transport is not started")
        return f"http://{self.host}:{self._server.server_address[1]}{self.path}"

    def start(self, handler: MessageHandler) -> None:
        self._handler = handler
        server = ThreadingHTTPServer((self.host, self.port), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(_SERVE_POLL_S,),
                                        name="webhook-transport", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        server, self._server = self._server, None
        self._handler = None
        if server is not None:
            server.shutdown()
            server.server_close()

    def send(self, message: OutgoingMessage) -> None:
        body = json.dumps({"channel": message.channel, "participant": message.participant, "text": message.text,
                           "kind": message.kind, "session_id": message.session_id}).encode()
        headers = {"Content-Type": "application/json"}
        if self.secret:
            headers[SIGNATURE_HEADER] = sign(self.secret, body)
        request = urllib.request.Request(self.callback_url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.send_timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            raise TransportError(f"callback {self.callback_url} answered HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise TransportError(f"callback {self.callback_url} unreachable: {exc}") from exc

    # --- one request (on a server thread) ---------------------------------------------------

    def _incoming(self, body: bytes, signature: str | None) -> tuple[int, dict[str, Any]]:
        if self.secret and not verify(self.secret, body, signature):
            return 401, {"error": f"missing or wrong {SIGNATURE_HEADER}"}
        try:
            data = json.loads(body or b"null")
        except ValueError:
            return 400, {"error": "the body is not JSON"}
        if not isinstance(data, dict):
            return 400, {"error": "the body must be a JSON object"}
        fields = {k: data.get(k) for k in ("channel", "participant", "text")}
        bad = [k for k, v in fields.items() if not isinstance(v, str) or (k != "text" and not v)]
        message_id = data.get("id", "")
        if bad or not isinstance(message_id, str | int):
            return 400, {"error": f"need string fields channel, participant, text (bad: {', '.join(bad) or 'id'})"}
        handler = self._handler
        if handler is None:
            return 503, {"error": "the bot is stopping"}
        try:
            outcome = handler(IncomingMessage(fields["channel"], fields["participant"], fields["text"],
                                              str(message_id)))
        except ValueError as exc:
            return 400, {"error": str(exc)}
        except RuntimeStoppedError:
            return 503, {"error": "the bot is shutting down; retry later"}
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            logger.opt(exception=True).error("webhook: handling a message failed")
            return 500, {"error": f"{type(exc).__name__}: {exc}"}
        return 202, {"accepted": True, "outcome": outcome}


def _make_handler(transport: WebhookTransport) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # Headers and body are written separately: without this every response on a
        # kept-alive connection stalls ~40 ms (Nagle meets delayed ACK).
        disable_nagle_algorithm = True
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            if length > transport.max_body_bytes:
                self._answer(413, {"error": f"body over {transport.max_body_bytes} bytes"}, close=True)
                return
            body = self.rfile.read(length)  # read it all before answering (else the client sees a reset)
            if self.path.split("?", 1)[0] != transport.path:
                self._answer(404, {"error": f"POST messages to {transport.path}"})
                return
            status, payload = transport._incoming(body, self.headers.get(SIGNATURE_HEADER))
            self._answer(status, payload)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/healthz":
                self._answer(200, {"ok": True})
            else:
                self._answer(404, {"error": "not found"})

        def _answer(self, status: int, payload: dict[str, Any], *, close: bool = False) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            logger.debug("webhook: {}", format % args)

    return Handler
