"""The listener's life: ``serve`` starts it on its own thread when ``[http] listen`` is set
and joins it on shutdown; a non-loopback address needs a token first; uvicorn's limits
hold; a plain daemon never imports it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import httpx
import pytest

from corvid_actors.daemon import http_listener
from corvid_actors.daemon.process import DaemonError
from corvid_actors.errors import ConfigError
from corvid_actors.http import HttpListener
from tests.http.test_sse import WAIT_S, listening, stream

#: a daemon subprocess starts (stub model, SQLite) and stops within this (seconds)
DAEMON_S = 60.0


def listener_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "http-listener"]


def test_a_non_loopback_address_is_refused_until_a_token_exists(stack, sim_clock):
    for name in ("viewer", "ops"):
        stack.tokens.revoke(name, now=sim_clock.now())
    config = stack.runtime.config.replace(http={"listen": "0.0.0.0:0"})
    with pytest.raises(ConfigError, match="not a loopback address and no API token exists"):
        HttpListener(stack.gateway, config.http, stack.runtime.clock).start()
    assert listener_threads() == []
    stack.tokens.create("remote", "read", now=sim_clock.now())
    listener = HttpListener(stack.gateway, config.http, stack.runtime.clock)
    listener.start()
    try:
        assert listener.host == "0.0.0.0" and listener.port > 0
        r = httpx.get(f"http://127.0.0.1:{listener.port}/healthz", timeout=WAIT_S)
        assert r.json() == {"ok": True}
    finally:
        listener.stop()
    assert listener_threads() == []


def test_a_taken_port_fails_the_start_with_the_setting_to_change(stack):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = stack.runtime.config.replace(http={"listen": f"127.0.0.1:{port}"})
        with pytest.raises(ConfigError, match=r"\[http\] listen = .*cannot listen there"):
            HttpListener(stack.gateway, config.http, stack.runtime.clock).start()
    assert listener_threads() == []


def test_uvicorn_limits_the_connections_and_the_header_size(stack):
    with listening(stack, limit_concurrency=2, h11_max_incomplete_event_size=1024) as listener:
        with stream(listener, "/api/v1/events", stack.read) as sse:
            assert sse.next() == {"comment": "corvid-actors events"}
            busy = httpx.get(listener.url + "/healthz", timeout=WAIT_S)  # the stream holds the only place
            assert busy.status_code == 503
        r = httpx.get(listener.url + "/healthz", timeout=WAIT_S)
        assert r.status_code == 200  # free again once the stream closed
        # headers arriving in more than one read must fit h11's buffer (one read takes 64 KiB):
        # refused with 400, or — the client still writing when uvicorn closes — a reset
        assert oversized_headers(listener.port) in ("400", "reset")
        assert httpx.get(listener.url + "/healthz", timeout=WAIT_S).status_code == 200


def oversized_headers(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as conn:
        try:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 200_000 + b"\r\n\r\n")
            answer = conn.recv(100)
        except (ConnectionResetError, BrokenPipeError):
            return "reset"
    return "400" if answer.startswith(b"HTTP/1.1 400") else answer.decode(errors="replace")


def test_without_the_extra_listen_fails_naming_it(monkeypatch, stack):
    monkeypatch.setattr(http_listener, "_MODULES", ("starlette", "corvid_no_such_module"))
    config = stack.runtime.config.replace(http={"listen": "127.0.0.1:0"})

    class Runtime:  # only what the check reads
        def __init__(self) -> None:
            self.config = config

    with pytest.raises(DaemonError, match=r"install the http extra \(pip install 'corvid-actors\[http\]'\)"):
        http_listener.start_http_listener(Runtime(), None, None,  # type: ignore[arg-type]
                                          lambda r: None, lambda s, f: lambda: None)


_SERVE = """
import json, sys, threading
import httpx
from corvid_actors.daemon import service as dm
from corvid_actors.db.api_tokens import ApiTokenStore
from corvid_actors.clock import RealClock
from corvid_actors.runtime.tree import open_store

data_dir, listen = sys.argv[1], sys.argv[2]
config = dm.load_daemon_config(None, data_dir=data_dir, provider="stub")
config = config.replace(http={"listen": listen})
data_dir = dm.data_dir_of(config).resolve()
dm.prepare_data_dir(data_dir)
store = open_store(config, RealClock())
secret = ApiTokenStore(store).create("ops", "operate") if listen else ""
store.close()
holder, report = {}, {}

def ready(about):
    daemon = holder["daemon"]
    report["about_http"] = about.get("http")
    report["http_imported"] = "corvid_actors.http" in sys.modules
    if daemon.http is not None:
        auth = {"Authorization": "Bearer " + secret}
        report["health"] = httpx.get(about["http"] + "/api/v1/health", headers=auth, timeout=10).json()["status"]
        started = httpx.post(about["http"] + "/api/v1/sessions", headers=auth, timeout=10,
                             json={"agent": "helper", "message": "hi", "create": True})
        report["started"] = started.status_code
        report["threads_up"] = sorted(t.name for t in threading.enumerate() if t.name == "http-listener")
    daemon._request_shutdown("test")

holder["daemon"] = dm.Daemon(config, data_dir, on_ready=ready)
code = holder["daemon"].run()
report["exit"] = code
report["threads_left"] = sorted(t.name for t in threading.enumerate() if t.name == "http-listener")
print("REPORT " + json.dumps(report), flush=True)
"""


def _serve(tmp_path, listen: str) -> dict:
    from tests.e2e.test_daemon import _env

    done = subprocess.run([sys.executable, "-c", _SERVE, str(tmp_path / "data"), listen], env=_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=DAEMON_S)
    assert "REPORT " in done.stdout, done.stderr[-3000:]
    return json.loads(done.stdout.split("REPORT ", 1)[1])


def test_serve_starts_the_listener_and_its_shutdown_joins_it(tmp_path):
    report = _serve(tmp_path, "127.0.0.1:0")
    assert report["about_http"].startswith("http://127.0.0.1:")
    assert report["health"] in ("ok", "degraded") and report["started"] == 200
    assert report["threads_up"] == ["http-listener"]
    assert report["exit"] == 0 and report["threads_left"] == []


def test_a_daemon_without_listen_never_imports_the_listener(tmp_path):
    report = _serve(tmp_path, "")
    assert report["about_http"] is None and report["http_imported"] is False
    assert report["exit"] == 0


def test_accepted_connections_send_without_waiting_for_an_ack(stack):
    # uvicorn writes a response's headers and its body in two sends: with Nagle's algorithm on
    # the accepted socket the body waits for the client's (delayed, ~40 ms) ACK of the headers
    # — the flat ~48 ms floor bench.http measured on every page. asyncio sets TCP_NODELAY on
    # an accepted socket only when the listening one says IPPROTO_TCP.
    with listening(stack) as listener, httpx.Client(timeout=WAIT_S) as client:
        assert client.get(listener.url + "/healthz").status_code == 200  # the connection stays open
        server = listener._server
        assert server is not None
        connections = list(server.server_state.connections)
        assert len(connections) == 1
        sock = connections[0].transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
