"""The webhook's own server: uvicorn (h11) serving :func:`~corvid_actors.chat.webhook_asgi.create_webhook_app`
on a thread of its own, as the daemon's HTTP listener serves the API (the same stack).

uvicorn does what it does the same way: the request line and headers are parsed by h11
(a malformed request, a negative or doubled ``Content-Length``, gets a JSON 400 here, not
h11's plain text), idle kept-alive connections close after ``read_timeout_s``
(``timeout_keep_alive``). What uvicorn has no setting for is in :class:`_CappedH11`, the
protocol this server runs: the connection caps (``max_connections`` in all and
``max_connections_per_client`` from one address, counted per connection as the stdlib server
did, idle ones included: beyond them a JSON 429 at once; uvicorn's ``limit_concurrency``
answers 503 and counts requests and tasks, not a client's idle connections), and the
whole-request deadline: the request line, headers and body must all arrive within
``read_timeout_s`` of the request's first byte (a slow drip of headers is closed at the
deadline; a late body gets 408 from the app, which reads the deadline from the scope).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from corvid_actors.chat.webhook_asgi import DEADLINE_EXTENSION, Caps
from corvid_actors.core.io_loop import RealTimeEventLoop
from corvid_actors.core.tcp import tcp_listener

#: seconds start() waits for uvicorn to serve, and stop() for its thread to end
_START_STOP_S = 10.0
#: a request head (line and headers) longer than this is handed to h11 as it is (h11's own limit is 16 KiB)
_MAX_HEAD_BYTES = 16 * 1024
#: seconds stop() lets a request in progress finish
_GRACEFUL_S = 1


def _raw_json(status: str, payload: dict[str, Any], extra: str = "") -> bytes:
    body = json.dumps(payload).encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}"
            "Connection: close\r\n\r\n").encode() + body


def _capped_protocol(caps: Caps, read_timeout_s: float) -> type[H11Protocol]:
    class _CappedH11(H11Protocol):
        _counted: str | None = None
        _deadline_timer: asyncio.TimerHandle | None = None
        _deadline = 0.0
        _head: bytes | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            client = self.client[0] if self.client else ""
            refusal = caps.admit(client)
            if refusal is not None:
                transport.write(_raw_json("429 Too Many Requests", {"error": refusal}, "Retry-After: 1\r\n"))
                transport.close()
                return
            self._counted = client
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._counted is not None:
                caps.release(self._counted)
                self._counted = None
            if self._deadline_timer is not None:
                self._deadline_timer.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            """The next request (line, headers and body) must arrive within read_timeout_s."""
            if self._deadline_timer is not None:
                self._deadline_timer.cancel()
            self._deadline = self.loop.time() + read_timeout_s
            self._deadline_timer = self.loop.call_at(self._deadline, self._expire)

        def _expire(self) -> None:
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                return  # the app is reading the body against the same deadline: it answers 408
            if not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            # the stdlib server took HTTP/1.1 requests without a Host header (platforms and
            # tests send them); h11 refuses them: a head without one gets an empty Host
            if self._head is not None or self.conn.their_state is h11.IDLE:
                data = (self._head or b"") + data
                end = data.find(b"\r\n\r\n")
                if end < 0 and len(data) < _MAX_HEAD_BYTES:
                    self._head = data  # the deadline still runs: a drip is closed at it
                    return
                self._head = None
                if end >= 0 and not any(line.lower().startswith(b"host:") for line in data[:end].split(b"\r\n")):
                    line_end = data.find(b"\r\n")
                    data = data[:line_end] + b"\r\nHost: " + data[line_end:]
            super().data_received(data)

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not None and self.cycle is not before:  # a new request: its scope learns the deadline
                scope = cast(dict[str, Any], self.cycle.scope)
                scope.setdefault("extensions", {})[DEADLINE_EXTENSION] = self._deadline

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def send_400_response(self, msg: str) -> None:
            # h11 refused the request line or headers (a negative, non-numeric or doubled
            # Content-Length among them): answer in JSON like every other refusal
            self.transport.write(_raw_json("400 Bad Request", {"error": f"bad request: {msg}"}))
            self.transport.close()

    return _CappedH11


class WebhookServer:
    """uvicorn serving ``app`` on ``host:port`` (0: a free one) on a thread; ``start()``,
    ``server_address``, ``stop()``."""

    def __init__(self, app: Any, host: str, port: int, *, read_timeout_s: float, max_connections: int,
                 max_connections_per_client: int) -> None:
        self.app = app
        self.read_timeout_s = read_timeout_s
        self._caps = Caps(max_connections, max_connections_per_client)
        self._sock = sock = tcp_listener(host, port)
        self.server_address: tuple[str, int] = sock.getsockname()[:2]
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        config = uvicorn.Config(self.app, http=_capped_protocol(self._caps, self.read_timeout_s), loop="asyncio",
                                timeout_keep_alive=max(1, round(self.read_timeout_s)),
                                timeout_graceful_shutdown=_GRACEFUL_S, lifespan="off", log_config=None,
                                access_log=False, server_header=False)
        self._server = server = uvicorn.Server(config)
        serving = threading.Event()
        failure: list[BaseException] = []

        async def serve() -> None:
            task = asyncio.create_task(server.serve(sockets=[self._sock]))
            while not server.started and not task.done():
                await asyncio.sleep(0.01)
            serving.set()
            await task

        def run() -> None:
            try:
                with asyncio.Runner(loop_factory=RealTimeEventLoop) as runner:
                    runner.run(serve())
            except BaseException as exc:  # noqa: BLE001 - reported to start()'s caller
                failure.append(exc)
            finally:
                serving.set()

        self._thread = threading.Thread(target=run, name="webhook-transport", daemon=True)
        self._thread.start()
        serving.wait(_START_STOP_S)
        if failure or not server.started:
            self.stop()
            raise RuntimeError(f"the webhook server did not start{f' ({failure[0]})' if failure else ''}")

    def stop(self) -> None:
        """Stop serving, join the thread, close the socket (idempotent)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(_START_STOP_S)
        self._thread = None
        self._sock.close()
