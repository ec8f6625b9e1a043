"""The admin channel's pure parts and the socket server with a stand-in handler: request
checking, replies, follow streams, the pid lock, config layering, tables."""

from __future__ import annotations

import io
import json
import socket
import threading
from pathlib import Path

import pytest

from corvid_actors.daemon.client import AdminClient, AdminRequestFailed
from corvid_actors.daemon.model_server import load_stub_script
from corvid_actors.daemon.process import DaemonError, PidLock
from corvid_actors.daemon.protocol import Request, RequestRejected, parse_request
from corvid_actors.daemon.render import render_table
from corvid_actors.daemon.settings import load_daemon_config
from corvid_actors.daemon.socket_io import FollowQueue
from corvid_actors.daemon.socket_server import AdminSocketServer, SocketSettings
from corvid_actors.errors import AdminError, ConfigError, ConflictError, StoreUnavailableError


def line(**fields) -> bytes:
    return json.dumps(fields).encode() + b"\n"


@pytest.mark.parametrize(("raw", "code", "says"), [
    (b"\xff\xfe", "bad_request", "not UTF-8"),
    (b"{nope", "bad_request", "not valid JSON"),
    (b"[" * 5000, "bad_request", "not valid JSON"),
    (b'"health"', "bad_request", "must be a JSON object"),
    (line(cmd="health", extra=1), "bad_request", "unknown request field(s): extra"),
    (line(cmd="health", id=[1]), "bad_request", '"id" must be'),
    (line(cmd=None), "bad_request", '"cmd" must be a string'),
    (line(cmd="reboot"), "unknown_command", "unknown command 'reboot'"),
    (line(cmd="stop"), "bad_request", "argument 'session' is required"),
    (line(cmd="stop", args={"session": ""}), "bad_request", "must not be empty"),
    (line(cmd="stop", args={"session": 7}), "bad_request", "must be a string, got int"),
    (line(cmd="stop", args="abcd"), "bad_request", '"args" must be a JSON object'),
    (line(cmd="extend", args={"session": "abcd", "minutes": True}), "bad_request", "must be a number"),
    (line(cmd="extend", args={"session": "abcd", "minutes": 0}), "bad_request", "must be > 0"),
    (line(cmd="sessions", args={"limit": 2.5}), "bad_request", "must be an integer"),
    (line(cmd="approve", args={"approval": "abcd", "session_wide": "yes"}), "bad_request", "true or false"),
    (line(cmd="health", args={"verbose": True}), "bad_request", "allowed: none"),
    (line(cmd="start", args={"agent": "a", "prompt": "p", "conversation_mode": "friends"}), "bad_request",
     "must be one of private, allowlist, public"),
    (line(cmd="start", args={"agent": "a", "prompt": "p", "max_budget_usd": -1}), "bad_request", "must be >= 0"),
])
def test_bad_requests_are_rejected_with_a_reason(raw, code, says):
    with pytest.raises(RequestRejected) as caught:
        parse_request(raw)
    assert caught.value.code == code and says in caught.value.message


def test_good_requests_keep_their_id_and_typed_arguments():
    assert parse_request(line(cmd="health")) == Request("health", {}, None)
    parsed = parse_request(line(id=9, cmd="extend", args={"session": "abcd", "minutes": 1.5}))
    assert parsed == Request("extend", {"session": "abcd", "minutes": 1.5}, 9)
    assert parse_request(line(cmd="mode", args=None)).args == {}
    assert parse_request(line(cmd="sessions", args={"status": None})).args == {}  # null means absent


def test_the_token_is_checked_before_anything_else_is_said():
    with pytest.raises(RequestRejected) as caught:
        parse_request(line(id="x", cmd="reboot"), token="t0ken")
    assert (caught.value.code, caught.value.request_id) == ("unauthorized", "x")
    assert parse_request(line(cmd="health", token="t0ken"), token="t0ken").cmd == "health"


# --- the server, with a stand-in handler --------------------------------------------------------


class Harness:
    def __init__(self, tmp_path: Path, **settings) -> None:
        self.sinks: list = []
        self.unfollowed = threading.Event()
        self.server = AdminSocketServer(tmp_path / "a.sock", self.handle, self.follow, SocketSettings(**settings))
        self.server.start()

    def handle(self, request: Request):
        if request.cmd == "stop":
            raise AdminError("not_found", "no such session")
        if request.cmd == "agents":
            raise RuntimeError("boom")
        if request.cmd == "approvals":
            raise StoreUnavailableError("store unavailable: the server is gone")
        if request.cmd == "mode":
            raise ConflictError("the agent exists with other settings")
        return {"cmd": request.cmd, "args": request.args}

    def follow(self, session, sink):
        if session == "missing":
            raise AdminError("not_found", "no session 'missing'")
        if session == "unstored":
            raise StoreUnavailableError("store unavailable: the server is gone")
        self.sinks.append(sink)
        return self.unfollowed.set

    def client(self) -> AdminClient:
        return AdminClient(self.server.path, timeout_s=5).connect()


def test_replies_errors_and_internal_failures(tmp_path):
    h = Harness(tmp_path)
    try:
        with h.client() as client:
            assert client.call("sessions", status="running") == {"cmd": "sessions", "args": {"status": "running"}}
            with pytest.raises(AdminRequestFailed) as caught:
                client.call("stop", session="abcd")
            assert caught.value.code == "not_found"
            with pytest.raises(AdminRequestFailed) as caught:
                client.call("agents")
            assert caught.value.code == "internal" and "boom" in caught.value.message
            assert client.call("health") == {"cmd": "health", "args": {}}  # still serving
    finally:
        h.server.close()
    assert not h.server.path.exists()


def test_a_store_found_down_is_answered_unavailable_any_other_runtime_error_bad_request(tmp_path):
    h = Harness(tmp_path)
    try:
        with h.client() as client:
            with pytest.raises(AdminRequestFailed) as caught:
                client.call("approvals")
            assert (caught.value.code, caught.value.message) == ("unavailable", "store unavailable: the server is gone")
            with pytest.raises(AdminRequestFailed) as caught:
                client.call("mode")
            assert caught.value.code == "bad_request"
        with h.client() as client, pytest.raises(AdminRequestFailed) as caught:
            next(iter(client.follow("unstored")))
        assert caught.value.code == "unavailable"
    finally:
        h.server.close()


def test_an_over_long_line_is_answered_and_the_connection_goes_on(tmp_path):
    h = Harness(tmp_path, max_request_bytes=100)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(h.server.path))
            replies = sock.makefile("rb")
            sock.sendall(b'{"cmd": "health", "pad": "' + b"x" * 500 + b'"}\n' + line(id=2, cmd="health"))
            assert json.loads(replies.readline())["error"]["code"] == "too_large"
            assert json.loads(replies.readline()) == {"id": 2, "ok": True, "result": {"cmd": "health", "args": {}}}
    finally:
        h.server.close()


def test_a_follow_queue_never_waits_and_reports_what_it_dropped():
    queue = FollowQueue(capacity=2)
    for n in range(5):
        queue.put(n)
    queue.hang_up()  # fits even when full
    assert [queue.get() for _ in range(3)][:2] == [(0, 3), (1, 0)]


def test_follow_streams_until_the_server_closes_then_says_why(tmp_path):
    h = Harness(tmp_path)
    client = h.client()
    with pytest.raises(AdminRequestFailed):
        list(client.follow("missing"))
    client.close()
    client = AdminClient(h.server.path, timeout_s=5).connect()
    client.send("follow", session="abcd")
    assert client.receive()["ok"] is True  # answered once the sink is registered
    [sink] = h.sinks
    received: list = []

    def read() -> None:
        while "end" not in (item := client.receive()):
            received.append(item)
        received.append(item)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(5):
            sink("abcd", "2026-01-01T00:00:00", {"type": "n", "n": n})
        h.server.close("maintenance")
        reader.join(5)
    finally:
        client.close()
    assert [item["event"]["n"] for item in received[:-1]] == [0, 1, 2, 3, 4]
    assert received[-1] == {"end": "maintenance"}
    assert h.unfollowed.wait(5)


# --- daemon pieces ---------------------------------------------------------------------------------


def test_one_daemon_per_data_directory(tmp_path):
    with PidLock(tmp_path / "corvid.pid"):
        with pytest.raises(DaemonError, match="another corvid-actors daemon"):
            with PidLock(tmp_path / "corvid.pid"):
                pass
    with PidLock(tmp_path / "corvid.pid") as lock:  # released: free again
        assert lock.path.read_text().strip().isdigit()
    assert not (tmp_path / "corvid.pid").exists()


def test_daemon_settings_come_from_the_environment_and_the_command_line(tmp_path):
    env = {"CORVID_ADMIN_TOKEN": "tok", "CORVID_LOG_FORMAT": "json", "CORVID_SHUTDOWN_TIMEOUT_S": "12.5",
           "CORVID_DATA_DIR": str(tmp_path / "env")}
    cfg = load_daemon_config(environ=env, provider="stub", data_dir=str(tmp_path / "cli"))
    d = cfg.daemon
    assert (d.admin_token, d.log_format, d.shutdown_timeout_s, d.provider) == ("tok", "json", 12.5, "stub")
    assert cfg.store.data_dir == str((tmp_path / "cli").resolve())
    with pytest.raises(ConfigError, match="CORVID_SHUTDOWN_TIMEOUT_S"):
        load_daemon_config(environ={"CORVID_SHUTDOWN_TIMEOUT_S": "soon"})
    with pytest.raises(ConfigError, match="daemon.log_format"):
        load_daemon_config(environ={"CORVID_LOG_FORMAT": "xml"})


def test_stub_scripts_are_checked(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"match": "hi", "tool_calls": [["list_files", {"path": "."}]]}]))
    [turn] = load_stub_script(script)
    assert (turn.match, turn.tool_calls) == ("hi", [("list_files", {"path": "."})])
    script.write_text(json.dumps([{"txt": "typo"}]))
    with pytest.raises(ConfigError, match="unknown field"):
        load_stub_script(script)
    with pytest.raises(ConfigError, match="cannot read"):
        load_stub_script(tmp_path / "missing.json")


@pytest.mark.parametrize("use_rich", [False, None])
def test_tables_align_with_or_without_rich(use_rich):
    out = io.StringIO()
    render_table(["ID", "STATUS"], [["abcd1234", "running"], ["ef", None]], out, use_rich=use_rich)
    rows = [r.split() for r in out.getvalue().splitlines()]
    assert rows == [["ID", "STATUS"], ["abcd1234", "running"], ["ef"]]
    lines = out.getvalue().splitlines()
    assert lines[1].index("running") == lines[0].index("STATUS")
