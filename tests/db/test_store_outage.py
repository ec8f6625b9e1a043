"""Issue 16: the store survives its server. A loopback TCP proxy sits between the store
and the real PostgreSQL; cutting it mid-run makes every operation fail at once with
"store unavailable" (sends refused, never acknowledged) and health degraded; restoring
it brings the store back within the backoff — through the StoreWatch probe, no restart.
Also: a lost connection with the server still up is reconnected and replayed once, and
a SQLite file deleted or made read-only is caught before a write."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from corvid_actors.actors.admin import AdminActor, AdminCommand, AdminWiring, Ready
from corvid_actors.actors.watchdog import WatchStats
from corvid_actors.config import Config
from corvid_actors.db.store import Store
from corvid_actors.errors import StoreUnavailableError
from corvid_actors.runtime import Runtime
from corvid_actors.testing import ScriptedProvider

#: every wait is bounded (real seconds)
WAIT_S = 10.0


class TcpProxy:
    """127.0.0.1:<port> → target. ``cut()`` closes every connection and refuses new ones;
    ``restore()`` accepts again on the same port."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.port = 0
        #: client bytes that make the proxy cut everything before passing them on
        self.cut_on: bytes | None = None
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=WAIT_S)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b, watch in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, watch), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, watch: bool) -> None:
        try:
            while data := src.recv(65536):
                if watch and self.cut_on is not None and self.cut_on in data:
                    self.cut_on = None
                    self.cut()  # the server never sees these bytes
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept(); close alone may not
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.cut()


def _via(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit((parts.scheme, f"{netloc[0]}@{host}" if len(netloc) == 2 else host, parts.path,
                       parts.query, parts.fragment))


@pytest.fixture
def proxy(pg_url: str) -> Iterator[TcpProxy]:
    parts = urlsplit(pg_url)
    p = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    yield p
    p.close()


def _health(admin) -> dict:
    return admin.ask(AdminCommand("health", {})).get(timeout=WAIT_S)


def _wait_for(predicate, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


@pytest.mark.postgres
def test_postgres_cut_mid_run_refuses_sends_and_recovers_within_the_backoff(pg_url, proxy):
    cfg = Config().replace(store={"reconnect_backoff_initial_s": 0.1, "reconnect_backoff_max_s": 0.4})
    provider = ScriptedProvider()
    cfg = cfg.replace(providers={"default_provider": provider.name})
    rt = Runtime(cfg, store_url=_via(pg_url, proxy.port), providers={provider.name: provider})
    admin = None
    try:
        admin = AdminActor.start(rt.internals.tracker, AdminWiring(
            supervisor=rt.internals.supervisor, approvals=rt.internals.approvals, bus=rt.internals.bus, timers=rt.internals.timers, slot_pool=rt.internals.slot_pool,
            credits=rt.internals.credits, store=rt.internals.store, providers=rt.internals.providers, clock=rt.clock))
        assert admin.ask(Ready()) is True
        s = rt.create_session(source="web")
        rt.start_process(s.id, "hello")
        rt.settle()
        assert rt.send_message(s.id, "before") is True
        rt.settle()
        assert _health(admin)["status"] == "ok"

        proxy.cut()
        with pytest.raises(StoreUnavailableError, match="^store unavailable: "):
            rt.send_message(s.id, "during the outage")
        assert rt.internals.store.available is False
        health = _health(admin)
        assert health["status"] == "degraded" and health["store"]["ok"] is False
        assert health["reasons"][0].startswith("store unavailable: ")
        with pytest.raises(StoreUnavailableError):  # fast, inside the backoff
            rt.send_message(s.id, "during the outage, again")
        assert rt.internals.supervisor.is_alive() and rt.failure is None

        proxy.restore()
        # nothing uses the store now: the StoreWatch probe (through Timers) brings it back
        _wait_for(lambda: rt.internals.store.available)
        assert rt.internals.store_watch.ask(WatchStats())["probes"] >= 1  # it was the probe, not a use
        assert _health(admin)["status"] == "ok"
        assert rt.send_message(s.id, "after") is True
        rt.settle()
        users = [m.content for m in rt.internals.store.messages(s.id) if m.role == "user"]
        assert users == ["hello", "before", "after"]
        assert rt.failure is None
    finally:
        if admin is not None:
            admin.stop()
        rt.shutdown()


@pytest.mark.postgres
def test_a_dropped_connection_is_reconnected_and_the_operation_replayed_once(pg_url, proxy):
    store = Store(_via(pg_url, proxy.port))
    try:
        s = store.create_session(source="web")
        proxy.cut()
        proxy.restore()  # the server is back at once, but the store's connection is dead
        assert store.append_message(s.id, "user", "replayed") > 0
        assert store.available
        assert [m.content for m in store.messages(s.id)] == ["replayed"]
    finally:
        store.close()


@pytest.mark.postgres
def test_reads_and_ledger_writes_fail_clearly_while_postgres_is_down(pg_url, proxy):
    from corvid_actors.db.ledger import Ledger

    store = Store(_via(pg_url, proxy.port), reconnect_backoff_s=(60.0, 60.0))
    try:
        s = store.create_session(source="web", participant="p")
        proxy.cut()
        with pytest.raises(StoreUnavailableError):
            store.get_session(s.id)
        with pytest.raises(StoreUnavailableError, match="store unavailable"):
            Ledger(store).credit("p", 5)
        reason = store.unavailable_reason
        assert reason and "lost" in reason
        proxy.restore()
        assert store.probe() is None  # a probe ignores the backoff
        assert Ledger(store).credit("p", 5) == 5
    finally:
        store.close()


class _Monotonic:
    """The store's clock for the file-check tests: moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_sqlite_file_deleted_refuses_writes_from_the_next_file_check_on(tmp_path):
    # the file is looked at once per file_check_interval_s before writes (issue 37), not per write
    path = tmp_path / "c.db"
    clock = _Monotonic()
    store = Store(f"sqlite:///{path}", monotonic=clock, file_check_interval_s=1.0)
    heard: list[str | None] = []
    store.add_listener(heard.append)
    try:
        s = store.create_session(source="web")
        assert store.append_message(s.id, "user", "kept") > 0
        os.unlink(path)
        clock.now += 1.0
        with pytest.raises(StoreUnavailableError, match="is gone"):
            store.append_message(s.id, "user", "would be lost")
        with pytest.raises(StoreUnavailableError):
            store.append_messages([(s.id, "user", "a"), (s.id, "user", "b")])
        assert store.probe() is not None and not store.available
        assert heard[:1] and "is gone" in heard[0]
    finally:
        store.close()


def test_a_deleted_sqlite_file_is_found_at_the_first_write_error_between_checks(tmp_path):
    path = tmp_path / "c.db"
    store = Store(f"sqlite:///{path}", monotonic=_Monotonic(), file_check_interval_s=60.0)
    try:
        store.create_session(source="web")  # the file was looked at: the next look is 60 s away
        os.unlink(path)
        with pytest.raises(StoreUnavailableError, match="is gone"):  # not the error it met
            store.append_message("no-such-session", "user", "refused by the foreign key")
        assert not store.available
    finally:
        store.close()


def test_a_probe_looks_at_the_sqlite_file_whatever_the_interval(tmp_path):
    path = tmp_path / "c.db"
    store = Store(f"sqlite:///{path}", monotonic=_Monotonic(), file_check_interval_s=60.0)
    try:
        s = store.create_session(source="web")
        os.unlink(path)
        assert "is gone" in (store.probe() or "")
        with pytest.raises(StoreUnavailableError):  # and writes are refused from then on
            store.append_user_turn(s.id, "refused")
    finally:
        store.close()


def test_a_negative_file_check_interval_is_refused(tmp_path):
    with pytest.raises(ValueError, match="file_check_interval_s"):
        Store(f"sqlite:///{tmp_path / 'c.db'}", file_check_interval_s=-1.0)


def test_sqlite_file_read_only_then_writable_again(tmp_path):
    path = tmp_path / "c.db"
    clock = _Monotonic()
    store = Store(f"sqlite:///{path}", reconnect_backoff_s=(60.0, 60.0), monotonic=clock)
    heard: list[str | None] = []
    store.add_listener(heard.append)
    try:
        s = store.create_session(source="web")
        path.chmod(0o444)
        clock.now += 1.0  # the next file check (default interval 1 s)
        with pytest.raises(StoreUnavailableError, match="read-only"):
            store.update_session(s.id, name="x")
        with pytest.raises(StoreUnavailableError):  # inside the backoff: refused at once
            store.get_session(s.id)
        path.chmod(0o644)
        assert store.probe() is None
        assert heard[-1] is None  # told that it is back
        store.update_session(s.id, name="y")
        assert store.get_session(s.id).name == "y"
    finally:
        store.close()


@pytest.mark.postgres
def test_a_store_closes_cleanly_while_its_server_is_away(pg_url, proxy):
    store = Store(_via(pg_url, proxy.port))
    store.create_session(source="web")
    proxy.cut()
    with pytest.raises(StoreUnavailableError):
        store.create_session(source="web")
    store.close()  # no exception: a shutdown during an outage must finish
    assert store.db.is_closed()


def test_an_in_memory_store_recovers_without_reconnecting_and_keeps_its_rows():
    store = Store("sqlite:///:memory:")
    try:
        s = store.create_session(source="web")
        # what a SQLite fault ("database or disk is full") records; nothing to reconnect to
        store._mark_unavailable("the database file cannot be written (test)")
        assert not store.available
        assert store.probe() is None and store.available
        assert store.get_session(s.id) is not None  # a reconnect would have dropped the database
    finally:
        store.close()


@pytest.mark.postgres
def test_a_connection_cut_during_commit_is_reported_and_never_replayed(pg_url, proxy):
    store = Store(_via(pg_url, proxy.port))
    try:
        before = len(store.list_sessions())
        proxy.cut_on = b"COMMIT"
        with pytest.raises(StoreUnavailableError, match="while committing.*may not have been saved"):
            store.create_session(source="web", name="cut in commit")
        proxy.restore()
        assert store.probe() is None
        # the server never saw the COMMIT, and the store did not replay the write: no row
        assert len(store.list_sessions()) == before
        assert store.create_session(source="web", name="after").name == "after"
    finally:
        store.close()
