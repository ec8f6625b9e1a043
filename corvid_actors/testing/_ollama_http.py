"""The HTTP side of the Ollama stub: a threading server and its request handler.

One handler thread per connection (keep-alive, HTTP/1.1). The handler reads the whole
body, hands the request to its :class:`Dispatcher` (the ``OllamaStubServer``), and
offers the writes a stub needs: one-send JSON, chunked NDJSON flushed per line, a
dropped connection (FIN or RST), and waits in real time that notice a client hanging
up.

Waits keep *real* time under freezegun: they block in ``select`` on the client socket,
and their deadline uses the genuine monotonic clock (kept in a module attribute that
freezegun's patching does not reach: it is bound before freezegun starts, or taken from
freezegun itself).
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from corvid_actors.core.jsontypes import WireJson
from corvid_actors.testing.realtime import real_monotonic


class RealTime:
    """The real clock for stub waits (class attributes escape freezegun's patching)."""

    monotonic = staticmethod(real_monotonic)
    sleep = staticmethod(time.sleep)


class ClientGone(Exception):
    """The client closed its end while we were streaming."""


class Dispatcher(Protocol):
    """What the server calls back into (implemented by ``OllamaStubServer``)."""

    def dispatch(self, handler: StubHandler, method: str, body: WireJson) -> None: ...

    def track(self, conn: socket.socket, *, add: bool) -> None: ...


class StubHandler(BaseHTTPRequestHandler):
    """One connection's handler; see the module docstring."""

    protocol_version = "HTTP/1.1"
    server: StubHTTPServer

    def setup(self) -> None:
        super().setup()
        # http.server writes headers and body separately: without this, Nagle meets
        # delayed ACK and every response on a reused connection stalls ~40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.dispatcher.track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.dispatcher.track(self.connection, add=False)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        pass

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        # read the whole body before answering, or the client sees a reset
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        self.server.dispatcher.dispatch(self, method, body)

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    # -- writing ----------------------------------------------------------------------

    def send_json(self, status: int, body: WireJson) -> None:
        """A complete JSON response."""
        self.send_bytes(status, json.dumps(body).encode(), "application/json; charset=utf-8")

    def send_bytes(
        self, status: int, data: bytes, content_type: str, *, head: bool = False
    ) -> None:
        """A complete response with ``Content-Length`` (no body for HEAD)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def start_stream(self) -> None:
        """Headers of a chunked NDJSON stream."""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_line(self, body: WireJson) -> None:
        """One NDJSON line as one chunk, sent at once."""
        data = json.dumps(body).encode() + b"\n"
        self._write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_stream(self) -> None:
        """The terminating chunk."""
        self._write(b"0\r\n\r\n")

    def _write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
        except OSError as exc:
            raise ClientGone() from exc

    def drop(self, *, reset: bool) -> None:
        """Close the connection without ending the chunked body (RST if ``reset``)."""
        self.close_connection = True
        if reset:
            linger = struct.pack("ii", 1, 0)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            self.connection.close()
        else:
            self.connection.shutdown(socket.SHUT_RDWR)

    def wait(self, delay_s: float) -> None:
        """Wait ``delay_s`` of real time; raise :class:`ClientGone` if the client hangs up."""
        if delay_s <= 0:
            return
        deadline = RealTime.monotonic() + delay_s
        while (remaining := deadline - RealTime.monotonic()) > 0:
            # poll, not select: select() cannot watch a descriptor >= 1024 (FD_SETSIZE),
            # which a stub serving a thousand streams at once hands out
            poller = select.poll()
            poller.register(self.connection, select.POLLIN)
            readable = poller.poll(remaining * 1000)
            if not readable:
                return
            try:
                peeked = self.connection.recv(1, socket.MSG_PEEK)
            except OSError as exc:
                raise ClientGone() from exc
            if not peeked:
                raise ClientGone()
            # the client sent bytes mid-stream (it never should): do not spin on them
            RealTime.sleep(remaining)
            return


class StubHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server on 127.0.0.1, on a free port, calling ``dispatcher``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        super().__init__(("127.0.0.1", 0), StubHandler)
