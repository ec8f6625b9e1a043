"""The HTTP listener: uvicorn serving :func:`~corvid_actors.http.app.create_app` on a
thread of its own with its own event loop (issue 39 item 1).

:meth:`HttpListener.start` binds the socket in the caller's thread (a taken port or a
bad address fails the daemon's start at once, and port 0 is known before anything
serves), refuses a non-loopback address while no API token exists, and returns once the
app's lifespan has started (the event hub follows the daemon's events).
:meth:`HttpListener.stop` ends every event stream, lets uvicorn close its connections
(bounded by ``GRACEFUL_SHUTDOWN_S``) and joins the thread: nothing is left running.

uvicorn's own limits do the jobs a hand-written server did: ``limit_concurrency`` (503
beyond it), ``timeout_keep_alive`` and h11's ``h11_max_incomplete_event_size`` (the
request line and headers); the body limit is the app's (``max_body_bytes``).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Mapping

import uvicorn
from loguru import logger
from starlette.types import ASGIApp

from corvid_actors.clock import Clock
from corvid_actors.core.io_loop import RealTimeEventLoop
from corvid_actors.core.tcp import tcp_listener
from corvid_actors.errors import ConfigError
from corvid_actors.http.app import create_app
from corvid_actors.http.auth import is_loopback
from corvid_actors.http.gateway import AdminGateway
from corvid_actors.schema.sections import HttpConfig

#: seconds uvicorn waits for open requests when the listener stops
GRACEFUL_SHUTDOWN_S = 5.0
#: seconds start() waits for the app's start-up before it gives up
STARTUP_TIMEOUT_S = 30.0


class HttpListener:
    """One listener; ``start()`` then ``stop()`` (any thread)."""

    def __init__(self, gateway: AdminGateway, settings: HttpConfig, clock: Clock,
                 mounts: Mapping[str, ASGIApp] | None = None) -> None:
        self.settings = settings
        self.gateway = gateway
        #: ``mounts``: extra ASGI apps under path prefixes (see create_app), e.g. the chat webhook
        self.app = create_app(gateway, settings, clock, mounts)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Bind, serve on a new thread, return once serving (raises ConfigError on a bad
        address, a taken port, or a non-loopback address without tokens)."""
        listen = self.settings.listen
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        if not is_loopback(host) and self.gateway.tokens.count_active() == 0:
            raise ConfigError(f"[http] listen = {listen!r} is not a loopback address and no API token exists: "
                              "create one first (`corvid-actors admin token create --name NAME --scope read`), "
                              "or listen on 127.0.0.1")
        self._sock = sock = _bind(host, int(port), listen)
        self.host, self.port = host, sock.getsockname()[1]
        s = self.settings
        config = uvicorn.Config(self.app, limit_concurrency=s.limit_concurrency,
                                timeout_keep_alive=int(max(1, round(s.timeout_keep_alive_s))),
                                h11_max_incomplete_event_size=s.h11_max_incomplete_event_size,
                                timeout_graceful_shutdown=int(GRACEFUL_SHUTDOWN_S), http="h11", loop="asyncio",
                                lifespan="on", log_config=None, access_log=False, server_header=False)
        self._server = server = uvicorn.Server(config)
        started = threading.Event()
        ready: list[bool] = []
        failure: list[BaseException] = []

        def on_ready() -> None:  # on the listener's loop, once the app's start-up is done
            ready.append(True)
            started.set()

        self.app.state.http.on_ready = on_ready

        def run() -> None:
            try:
                with asyncio.Runner(loop_factory=RealTimeEventLoop) as runner:
                    runner.run(self._serve(server, sock))
            except BaseException as exc:  # noqa: BLE001 - reported to start()'s caller
                failure.append(exc)
            finally:
                started.set()

        self._thread = threading.Thread(target=run, name="http-listener", daemon=True)
        self._thread.start()
        started.wait(STARTUP_TIMEOUT_S)
        if failure or not ready:
            self.stop()
            raise ConfigError(f"[http] listen = {listen!r}: the listener did not start"
                              + (f" ({failure[0]})" if failure else " (see the log)"))
        logger.info("HTTP API listening at {}", self.url)

    async def _serve(self, server: uvicorn.Server, sock: socket.socket) -> None:
        self._loop = asyncio.get_running_loop()
        await server.serve(sockets=[sock])

    def stop(self) -> None:
        """End the streams, stop serving and join the thread (idempotent)."""
        server, loop = self._server, self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.app.state.http.hub.close)
            except RuntimeError:
                pass  # the loop closed in between
        if server is not None:
            server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _bind(host: str, port: int, listen: str) -> socket.socket:
    try:
        sock = tcp_listener(host, port)
    except OSError as exc:
        raise ConfigError(f"[http] listen = {listen!r}: cannot listen there ({exc.strerror or exc}); "
                          "choose a free host:port, or \"\" for no HTTP listener") from None
    sock.set_inheritable(True)
    return sock

