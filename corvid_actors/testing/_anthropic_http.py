"""The HTTP side of the Anthropic stub: a threading server and its request handler.

One handler thread per connection (keep-alive, HTTP/1.1). It records each request with
its stub (a :class:`StubBackend`: the ``AnthropicStubServer``), checks auth, and answers
from the next scripted turn: plain JSON in one send, or SSE over chunked transfer flushed
per event.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from corvid_actors.core.jsontypes import JsonValue, WireJson
from corvid_actors.testing._anthropic_wire import (
    ERROR_STATUS,
    Turn,
    error_body,
    estimate_tokens,
    last_user_text,
    turn_events,
    turn_message,
)

#: a "stall" fault hangs until the client leaves, the stub closes, or this long passes
STALL_LIMIT_S = 30.0

_MODEL_PATH = re.compile(r"^/v1/models/(?P<id>[^/?]+)$")


@dataclass(frozen=True)
class RecordedRequest:
    """One request the stub received (before any auth or validation)."""

    method: str
    path: str
    headers: dict[str, str]
    json: WireJson

    @property
    def user_text(self) -> str:
        """Text of the last user message of a ``/v1/messages`` body ("" otherwise)."""
        return last_user_text(self.json) if isinstance(self.json, dict) else ""


@dataclass(frozen=True)
class Disconnect:
    """A client closed its connection while the stub was still streaming to it."""

    request_index: int
    events_sent: int


class _ClientGone(Exception):
    """The client closed the connection mid-stream."""


class StubBackend(Protocol):
    """What the handler needs of its stub (implemented by ``AnthropicStubServer``).

    The ``_`` members are the stub's private half: the handler's callbacks, kept out of
    the stub's public API. Each is thread-safe (the handlers run on their own threads).
    """

    @property
    def api_key(self) -> str | None:
        """The one key accepted, or None for any non-empty key."""

    @property
    def models(self) -> Mapping[str, int]:
        """Model ids ``GET /v1/models/{id}`` knows, with their ``max_input_tokens``."""

    def _record(self, request: RecordedRequest) -> tuple[int, str]:
        """Keep ``request``; its index among all requests served and its request id."""

    def _outage(self) -> int | None:
        """The status every request answers while an outage is set, else None."""

    def _take_turn(self, body: Mapping[str, WireJson]) -> Turn:
        """The scripted turn that answers ``body`` (the default reply when none matches)."""

    def _record_disconnect(self, disconnect: Disconnect) -> None:
        """A client went away mid-stream."""

    def _stream_completed(self) -> None:
        """A stream without a fault was written to its end."""

    def _notify(self) -> None:
        """A stream event was sent (wakes ``wait_for``)."""

    def _connection_opened(self, sock: socket.socket, thread: threading.Thread) -> None:
        """A connection opened on ``thread`` (closing the stub cuts it and joins the thread)."""

    def _connection_closed(self, sock: socket.socket) -> None:
        """A connection closed."""


class StubHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its stub (a :class:`StubBackend`)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, stub: StubBackend) -> None:
        self.stub = stub
        super().__init__(address, handler)


class StubHandler(BaseHTTPRequestHandler):
    """Answers one connection's requests from the stub's script (runs on its own thread).

    It calls back into the stub only through :class:`StubBackend`.
    """

    protocol_version = "HTTP/1.1"
    server: StubHTTPServer

    def setup(self) -> None:
        super().setup()
        # Python's http.server writes headers and body separately: without NODELAY,
        # Nagle meets delayed ACK and every response stalls ~40 ms (FIELD-NOTES).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.stub._connection_opened(self.connection, threading.current_thread())

    def finish(self) -> None:
        self.server.stub._connection_closed(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: object) -> None:
        """Silence the per-request log lines."""

    # --- dispatch ------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch(None)

    def do_POST(self) -> None:
        self._dispatch(self._read_body())

    def _read_body(self) -> bytes:
        # Read all of it before answering, or the client sees a reset (FIELD-NOTES).
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self, raw: bytes | None) -> None:
        stub = self.server.stub
        body: WireJson = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        path = self.path.split("?", 1)[0]
        headers = {k.lower(): v for k, v in self.headers.items()}
        index, self.request_id = stub._record(RecordedRequest(self.command, path, headers, body))
        outage = stub._outage()
        if outage is not None:
            self._send_error(outage, ERROR_STATUS.get(outage, "api_error"), "stub outage")
        elif not self._authorised(headers):
            self._send_error(401, "authentication_error", "invalid x-api-key")
        elif self.command == "GET" and (m := _MODEL_PATH.match(path)):
            self._get_model(m.group("id"))
        elif self.command == "POST" and path == "/v1/messages/count_tokens":
            self._count_tokens(body)
        elif self.command == "POST" and path == "/v1/messages":
            self._messages(body, index)
        else:
            self._send_error(404, "not_found_error", f"Not found: {self.command} {path}")

    def _authorised(self, headers: Mapping[str, str]) -> bool:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        key = headers.get("x-api-key") or (token.strip() if scheme.lower() == "bearer" else "")
        expected = self.server.stub.api_key
        return bool(key) and (expected is None or key == expected)

    def _get_model(self, model_id: str) -> None:
        window = self.server.stub.models.get(model_id)
        if window is None:
            self._send_error(404, "not_found_error", f"model: {model_id}")
            return
        self._send_json(200, {
            "type": "model", "id": model_id, "display_name": model_id,
            "created_at": "2025-01-01T00:00:00Z", "lifecycle": "active",
            "max_input_tokens": window, "max_tokens": 64_000,
        })

    def _count_tokens(self, body: WireJson) -> None:
        if not isinstance(body, dict) or "messages" not in body or "model" not in body:
            self._send_error(400, "invalid_request_error", "model and messages are required")
            return
        self._send_json(200, {"input_tokens": estimate_tokens(body)})

    def _messages(self, body: WireJson, index: int) -> None:
        stub = self.server.stub
        missing = [k for k in ("model", "messages", "max_tokens") if not isinstance(body, dict) or k not in body]
        if missing:
            # The health probe (POST {}) lands here; it must not consume a scripted turn.
            self._send_error(400, "invalid_request_error", f"{missing[0]}: Field required")
            return
        turn = stub._take_turn(body)
        fault = turn.fault
        if fault is not None and fault.is_http:
            headers = {}
            if fault.retry_after_s is not None:
                headers["retry-after"] = f"{fault.retry_after_s:g}"
            if fault.retry_after_ms is not None:
                headers["retry-after-ms"] = f"{fault.retry_after_ms:g}"
            status, payload = fault.http_error()
            self._send_json(status, payload, headers)
            return
        if body.get("stream"):
            self._stream(turn, body, index)
            return
        try:
            self._reply_once(turn, body)
        except _ClientGone:
            self.close_connection = True
            stub._record_disconnect(Disconnect(index, 0))

    def _reply_once(self, turn: Turn, body: Mapping[str, WireJson]) -> None:
        """A non-streamed answer: the Message as JSON, or the fault as a plain failure."""
        fault = turn.fault
        if fault is not None and fault.kind in ("drop", "stall"):
            if fault.kind == "stall":
                self._wait(STALL_LIMIT_S)
            self._drop()
        elif fault is not None:  # stream_error on a non-streamed call: a plain error status
            status, payload = fault.http_error()
            self._send_json(status, payload)
        else:
            self._wait(turn.delay_s)
            self._send_json(200, turn_message(turn, body, self._message_id()))

    # --- streaming ---------------------------------------------------------------------

    def _stream(self, turn: Turn, body: Mapping[str, WireJson], index: int) -> None:
        events = turn_events(turn, body, self._message_id())
        fault = turn.fault
        cut = min(fault.after_events, len(events)) if fault is not None else len(events)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", self.request_id)
        self.end_headers()
        sent = 0
        try:
            for name, data in events[:cut]:
                self._wait(turn.delay_s)
                self._write_event(name, data)
                sent += 1
                self.server.stub._notify()
            if fault is not None and fault.kind in ("drop", "stall"):
                if fault.kind == "stall":
                    self._wait(STALL_LIMIT_S)
                self._drop(partial_chunk=True)
                return
            if fault is not None:  # stream_error
                self._write_event("error", error_body(fault.stream_error_type, fault.stream_error_message))
            self.wfile.write(b"0\r\n\r\n")
            if fault is None:
                self.server.stub._stream_completed()
        except _ClientGone:
            self.close_connection = True
            self.server.stub._record_disconnect(Disconnect(index, sent))

    def _message_id(self) -> str:
        return "msg_stub_" + self.request_id.rsplit("_", 1)[-1]

    def _write_event(self, name: str, data: Mapping[str, WireJson]) -> None:
        # Every event carries an `event:` line: the SDK drops data-only events.
        payload = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        except OSError as exc:
            raise _ClientGone() from exc

    def _wait(self, delay_s: float) -> None:
        """Wait ``delay_s`` (real time), noticing at once if the client hangs up."""
        if delay_s <= 0:
            return
        # The client sends nothing more on this connection while we stream, so the
        # socket turning readable means EOF or reset: the client went away.
        # poll, not select: select() cannot watch a descriptor >= 1024 (FD_SETSIZE)
        poller = select.poll()
        poller.register(self.connection, select.POLLIN)
        if poller.poll(delay_s * 1000):
            try:
                gone = self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                raise _ClientGone()

    def _drop(self, *, partial_chunk: bool = False) -> None:
        if partial_chunk:  # promise 64 bytes, deliver 5: the client sees a broken body
            try:
                self.wfile.write(b"40\r\nevent")
            except OSError:
                pass
        self.close_connection = True
        shutdown_quietly(self.connection)

    # --- plain responses ---------------------------------------------------------------

    def _send_json(self, status: int, payload: JsonValue, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        lines = [f"HTTP/1.1 {status} {self.responses.get(status, ('Error',))[0]}",
                 "content-type: application/json", f"content-length: {len(data)}",
                 f"request-id: {self.request_id}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        # Status line, headers and body in one send (no Nagle stall, one packet).
        try:
            self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
        except OSError:
            self.close_connection = True

    def _send_error(self, status: int, error_type: str, message: str) -> None:
        self._send_json(status, error_body(error_type, message))


def shutdown_quietly(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
