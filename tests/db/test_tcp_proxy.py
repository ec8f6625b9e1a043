"""The loopback TCP proxy (corvid_actors.testing.tcp_proxy): forwarding, cuts, refusals, holds;
and a PostgreSQL store behind it losing its connection."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from corvid_actors.db.store import Store
from corvid_actors.errors import StoreUnavailableError
from corvid_actors.testing.tcp_proxy import TcpProxy
from tests.db.conftest import pg_base_url

#: every socket wait in these tests is bounded (seconds)
TIMEOUT_S = 5.0


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield server.server_address[0], server.server_address[1]
    server.shutdown()
    server.server_close()


def _client(proxy: TcpProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT_S)
    return sock


def _dropped(sock: socket.socket) -> bool:
    """Is the connection over (reset, or ended)?"""
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


def _roundtrip(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def test_the_proxy_forwards_both_ways(echo_server: tuple[str, int]) -> None:
    with TcpProxy(*echo_server) as proxy, _client(proxy) as sock:
        assert _roundtrip(sock, b"hello through the proxy") == b"hello through the proxy"
        assert proxy.connections == 1


def test_cut_drops_every_open_connection_and_new_ones_still_pass(echo_server: tuple[str, int]) -> None:
    with TcpProxy(*echo_server) as proxy:
        first, second = _client(proxy), _client(proxy)
        assert _roundtrip(first, b"a") == b"a" and _roundtrip(second, b"b") == b"b"

        assert proxy.cut() == 2
        for sock in (first, second):
            assert _dropped(sock)
            sock.close()
        assert proxy.connections == 0
        with _client(proxy) as again:
            assert _roundtrip(again, b"c") == b"c"


def test_refuse_closes_new_connections_until_admitted(echo_server: tuple[str, int]) -> None:
    with TcpProxy(*echo_server) as proxy:
        proxy.refuse()
        try:
            refused = _client(proxy)
        except OSError:
            pass  # reset before connect() returned (a loaded machine): refused all the same
        else:
            with refused:
                assert _dropped(refused)
        proxy.admit()
        with _client(proxy) as sock:
            assert _roundtrip(sock, b"back") == b"back"


def test_partition_cuts_the_open_connections_and_refuses_new_ones_until_admitted(
        echo_server: tuple[str, int]) -> None:
    with TcpProxy(*echo_server) as proxy:
        open_one = _client(proxy)
        assert _roundtrip(open_one, b"a") == b"a"
        assert proxy.partition() == 1
        with open_one:
            assert _dropped(open_one)
        try:
            again = _client(proxy)
        except OSError:
            pass  # reset before connect() returned: refused all the same
        else:
            with again:
                assert _dropped(again)
        assert proxy.connections == 0
        proxy.admit()
        with _client(proxy) as sock:
            assert _roundtrip(sock, b"back") == b"back"


def test_hold_keeps_bytes_waiting_until_release(echo_server: tuple[str, int]) -> None:
    with TcpProxy(*echo_server) as proxy, _client(proxy) as sock:
        proxy.hold()
        sock.sendall(b"paused")
        sock.settimeout(0.2)
        with pytest.raises(TimeoutError):
            sock.recv(16)
        proxy.release()
        sock.settimeout(TIMEOUT_S)
        assert sock.recv(16) == b"paused"


@pytest.mark.postgres
def test_a_store_behind_the_proxy_survives_a_cut_and_reports_an_outage(
        pg_url: str, open_store: Callable[[str], Store]) -> None:
    server = urlsplit(pg_base_url())
    with TcpProxy(server.hostname or "127.0.0.1", server.port or 5432) as proxy:
        store = open_store(proxy.url(pg_url))
        sid = store.create_session(name="behind a proxy").id

        assert proxy.cut() == 1
        assert store.get_session(sid).name == "behind a proxy"  # reconnected, replayed once
        assert proxy.connections == 1

        proxy.refuse()
        proxy.cut()
        with pytest.raises(StoreUnavailableError):
            store.get_session(sid)
        assert not store.available
        proxy.admit()
        assert store.probe() is None
        assert store.get_session(sid).name == "behind a proxy"
