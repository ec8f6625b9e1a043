"""A loopback TCP proxy that can cut its connections: network faults for failover tests.

Point a client (a store's ``postgresql://`` URL) at the proxy instead of the server, then
break the path between them on purpose:

- :meth:`TcpProxy.cut` drops every open connection at once (both ends see it fail), as a
  network partition or a server restart does;
- :meth:`TcpProxy.refuse` closes new connections as soon as they are accepted, until
  :meth:`TcpProxy.admit` lets them through again, as a server that stays unreachable;
- :meth:`TcpProxy.hold` stops forwarding (bytes wait in the proxy, nothing fails) until
  :meth:`TcpProxy.release`: a peer that pauses, as a daemon frozen by a long GC pause or
  a stopped VM, whose leases expire while it holds its connection.

    with TcpProxy("127.0.0.1", 5432) as proxy:
        store = Store(proxy.url("postgresql://postgres@127.0.0.1:5432/test"))
        proxy.cut()          # the store's next operation finds its connection lost

It binds 127.0.0.1 only, uses plain threads (two per connection) and real time: it is a
test tool, never part of a runtime.
"""

from __future__ import annotations

import socket
import struct
import threading
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

__all__ = ["TcpProxy"]

#: bytes read from one side before they are forwarded to the other
_CHUNK = 65536
#: the accept loop's wake-up period while idle (seconds): how fast close() returns
_ACCEPT_POLL_S = 0.05


class _Pipe:
    """One proxied connection: the client's socket and the server's, pumped both ways."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self._closed = False
        self._lock = threading.Lock()

    def close(self, *, reset: bool) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for sock in (self.client, self.server):
            try:
                if reset:
                    # RST rather than FIN, so the peer sees "connection reset" as on a partition;
                    # SHUT_RD wakes the pump blocked in recv() without sending anything.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    sock.shutdown(socket.SHUT_RD)
                else:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port`` (see the module docstring).

    Thread-safe. ``listen_port=0`` picks a free port (:attr:`port`). Start it with
    :meth:`start` or ``with``; :meth:`close` drops everything and stops it.
    """

    def __init__(self, target_host: str, target_port: int, *, listen_port: int = 0) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", listen_port))
        self._listener.settimeout(_ACCEPT_POLL_S)
        self._lock = threading.Lock()
        self._pipes: set[_Pipe] = set()
        self._refusing = False
        self._flowing = threading.Event()
        self._flowing.set()
        self._stopping = threading.Event()
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"tcp-proxy-{self.port}", daemon=True)
        #: connections accepted so far (refused ones included)
        self.accepted = 0

    @property
    def port(self) -> int:
        """The port the proxy listens on (127.0.0.1)."""
        return int(self._listener.getsockname()[1])

    def url(self, url: str) -> str:
        """``url`` (``scheme://user@host:port/…``) with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return urlunsplit((parts.scheme, f"{userinfo}127.0.0.1:{self.port}", parts.path, parts.query,
                           parts.fragment))

    @property
    def connections(self) -> int:
        """Connections open through the proxy now."""
        with self._lock:
            return len(self._pipes)

    def start(self) -> TcpProxy:
        self._acceptor.start()
        return self

    def cut(self) -> int:
        """Reset every open connection (both sides see it fail); how many were cut. New
        connections are still let through (see :meth:`refuse`)."""
        with self._lock:
            pipes, self._pipes = self._pipes, set()
        for pipe in pipes:
            pipe.close(reset=True)
        return len(pipes)

    def partition(self) -> int:
        """Cut the client off: refuse new connections, then reset the open ones (in that
        order, so a reconnect racing the cut cannot slip through); how many were cut.
        :meth:`admit` ends it."""
        self.refuse()
        return self.cut()

    def refuse(self) -> None:
        """Close every new connection as soon as it is accepted (open ones stay: :meth:`cut`)."""
        with self._lock:
            self._refusing = True

    def admit(self) -> None:
        """Let new connections through again."""
        with self._lock:
            self._refusing = False

    def hold(self) -> None:
        """Stop forwarding bytes (they wait; nothing fails) until :meth:`release`."""
        self._flowing.clear()

    def release(self) -> None:
        """Forward again what :meth:`hold` kept waiting."""
        self._flowing.set()

    def close(self) -> None:
        """Stop accepting, cut every connection and wait for the accept loop to end."""
        self._stopping.set()
        self._flowing.set()
        if self._acceptor.is_alive():
            self._acceptor.join()
        self._listener.close()
        self.cut()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- the threads ----------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            with self._lock:
                refusing = self._refusing
            if refusing:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()  # the target is down: the client sees its connection closed
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pipe = _Pipe(client, server)
            with self._lock:
                self._pipes.add(pipe)
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(pipe, src, dst), daemon=True,
                                 name=f"tcp-proxy-{self.port}-pump").start()

    def _pump(self, pipe: _Pipe, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(_CHUNK)
                if not data:
                    break
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._pipes.discard(pipe)
        pipe.close(reset=False)
