"""An httpx transport whose in-flight responses another thread can cut.

The ``ollama`` client's streaming generator cannot be closed from another thread while
it is being iterated, and ``socket.close()`` does not wake a ``recv()`` blocked in
another thread. So the transport remembers each response's socket (httpcore exposes
it as the ``network_stream`` extension) and :meth:`AbortableTransport.abort` shuts it
down: the reading thread gets EOF at once and the server sees the disconnect.
"""

from __future__ import annotations

import functools
import socket
import ssl
import threading

import httpx


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every client: building one loads the CA bundle (~60 ms), and
    the provider builds a client per call."""
    return httpx.create_ssl_context()


def _shutdown(sock: socket.socket) -> None:
    # shutdown, not close: close() does not wake a recv() blocked in another thread
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class AbortableTransport(httpx.BaseTransport):
    """httpx's default transport, plus :meth:`abort` callable from any thread.

    It remembers the socket of every response (httpcore exposes it as the
    ``network_stream`` extension) so that :meth:`abort` can shut it down and unblock
    the thread that is reading the stream.
    """

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport(verify=shared_ssl_context())
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._aborted = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            if self._aborted:
                raise httpx.ConnectError("request cancelled", request=request)
        response = self._inner.handle_request(request)
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            with self._lock:
                aborted = self._aborted
                if not aborted:
                    self._sockets.append(sock)
            if aborted:  # cancelled while connecting: cut it now
                _shutdown(sock)
        return response

    def abort(self) -> None:
        """Shut every response socket down; later requests fail at once."""
        with self._lock:
            self._aborted = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shutdown(sock)

    def close(self) -> None:
        self._inner.close()
