"""The webhook transport's HTTP side: a threading server capped at ``max_connections``,
and at ``max_connections_per_client`` from any one client address (more are answered 429
at once), and the request handler that checks each POST's
length, path and signature header before reading its body against a deadline, then
hands the body to :class:`~corvid_actors.chat.webhook.WebhookTransport`. Stdlib only."""

from __future__ import annotations

import contextlib
import io
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from loguru import logger

from corvid_actors.chat.signatures import SIGNATURE_HEADER
from corvid_actors.deadline_io import DeadlineSocketIO

if TYPE_CHECKING:
    from corvid_actors.chat.webhook import WebhookTransport

_DIGITS = re.compile(r"[0-9]{1,15}")
#: how long an early answer waits for the rest of a body it will not use
_LINGER_S = 1.0


class RequestError(Exception):
    """Answer ``status`` with ``message`` and close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class CappedServer(ThreadingHTTPServer):
    """At most ``max_connections`` served at once, and at most ``max_connections_per_client``
    from one client address (so one client's idle flood cannot take every slot); more are
    answered 429 at once. A slot is released when its connection's thread ends."""

    # a burst of connections must reach accept() to be answered (429 or served), not wait
    # in SYN retries behind socketserver's default backlog of 5
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 max_connections: int, max_connections_per_client: int) -> None:
        super().__init__(address, handler)
        self.max_connections = max_connections
        self.max_connections_per_client = max_connections_per_client
        self._active = 0
        #: connections served per client address (an address leaves when its last closes)
        self._active_by_client: dict[str, int] = {}
        self._count_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        client = _client_of(client_address)
        with self._count_lock:
            refusal = self._refusal(client)
            if refusal is None:
                self._active += 1
                self._active_by_client[client] = self._active_by_client.get(client, 0) + 1
        if refusal is not None:
            _refuse(request, refusal)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(client)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(_client_of(client_address))

    def _refusal(self, client: str) -> str | None:
        """Why a new connection from ``client`` is refused, or None (under the count lock)."""
        if self._active >= self.max_connections:
            return f"too many connections (at most {self.max_connections}); retry shortly"
        if self._active_by_client.get(client, 0) >= self.max_connections_per_client:
            return (f"too many connections from your address (at most {self.max_connections_per_client}); "
                    "retry shortly")
        return None

    def _release(self, client: str) -> None:
        with self._count_lock:
            self._active -= 1
            left = self._active_by_client[client] - 1
            if left:
                self._active_by_client[client] = left
            else:
                del self._active_by_client[client]


def _client_of(client_address: Any) -> str:
    """The client's address without its port: what the per-client cap counts."""
    return str(client_address[0])


def _refuse(request: Any, message: str) -> None:
    """Answer 429 with ``message`` without waiting: this runs on the accept thread."""
    body = json.dumps({"error": message}).encode()
    head = (f"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n").encode()
    try:
        request.send(head + body, socket.MSG_DONTWAIT)  # never wait on the accept thread
    except OSError:
        pass


def make_handler(transport: WebhookTransport) -> type[BaseHTTPRequestHandler]:
    """The request handler class serving ``transport``."""
    class Handler(BaseHTTPRequestHandler):
        # Headers and body are written separately: without this every response on a
        # kept-alive connection stalls ~40 ms (Nagle meets delayed ACK).
        disable_nagle_algorithm = True
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # the plain file: replaced by one reading against a deadline
            self._raw = DeadlineSocketIO(self.connection, transport._io_clock)
            self.rfile = io.BufferedReader(self._raw)

        def handle_one_request(self) -> None:
            # line, headers and body of one request must all arrive within read_timeout_s
            # (an idle kept-alive connection closes after it too)
            self._raw.deadline = transport._io_clock.monotonic() + transport.read_timeout_s
            super().handle_one_request()

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = 0
            try:
                length = self._content_length()
                if self.path.split("?", 1)[0] != transport.path:
                    raise RequestError(404, f"POST messages to {transport.path}")
                transport._precheck(self.headers.get(SIGNATURE_HEADER))
                body = self._read_body(length)
            except RequestError as exc:
                self._answer(exc.status, {"error": exc.message}, close=True)
                if exc.status in (401, 404):
                    self._linger(length)
                return
            status, payload = transport._incoming(body, self.headers.get(SIGNATURE_HEADER))
            self._answer(status, payload)

        def _content_length(self) -> int:
            if self.headers.get("Transfer-Encoding"):
                raise RequestError(400, "chunked bodies are not accepted: send a Content-Length")
            values = self.headers.get_all("Content-Length") or []
            if not values:
                raise RequestError(400, "a Content-Length header is required")
            if len(set(values)) != 1 or not _DIGITS.fullmatch(values[0].strip()):
                raise RequestError(400, "Content-Length must be one non-negative whole number")
            length = int(values[0])
            if length > transport.max_body_bytes:
                raise RequestError(413, f"body over {transport.max_body_bytes} bytes")
            return length

        def _read_body(self, length: int) -> bytes:
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                raise RequestError(408, f"the request did not arrive within {transport.read_timeout_s:g} s") \
                    from None
            if len(body) != length:
                raise RequestError(400, "the body ended before Content-Length bytes")
            return body

        def _linger(self, length: int) -> None:
            """After answering early, swallow the (size-checked) body the client is still
            sending, briefly: closing with unread data makes the kernel send a reset, and the
            client could lose the answer. Never more than the checked length or _LINGER_S."""
            self._raw.deadline = min(self._raw.deadline or 0.0, transport._io_clock.monotonic() + _LINGER_S)
            with contextlib.suppress(OSError, ValueError):
                while length > 0:
                    chunk = self.rfile.read1(min(length, 65536))
                    if not chunk:
                        return
                    length -= len(chunk)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/healthz":
                self._answer(200, {"ok": True})
            else:
                self._answer(404, {"error": "not found"})

        def _answer(self, status: int, payload: dict[str, Any], *, close: bool = False) -> None:
            data = json.dumps(payload).encode()
            self.connection.settimeout(transport.read_timeout_s)  # a bounded write
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
