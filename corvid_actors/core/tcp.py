"""A listening TCP socket for the package's uvicorn servers (the HTTP listener, the chat
webhook server).

One place for what both need: ``IPPROTO_TCP`` named when the socket is made, because
asyncio sets ``TCP_NODELAY`` on an accepted socket only when its protocol says TCP, and
uvicorn writes a response's headers and body in two sends: with Nagle on, the body waited
for the client's delayed ACK (a flat ~40 ms a request).
"""

from __future__ import annotations

import socket


def tcp_listener(host: str, port: int, *, backlog: int = 128) -> socket.socket:
    """A socket bound to ``host:port`` (0: a free port) and listening; IPv6 when ``host``
    has a colon. Raises OSError (the socket closed) when it cannot bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(backlog)  # a burst of connections reaches accept() and is answered
    except OSError:
        sock.close()
        raise
    return sock
