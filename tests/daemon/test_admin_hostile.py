"""The admin socket under hostile input: every malformed value is answered with an error
reply by the validator (never an exception, never a traceback in the log), connections
that never authenticate or sit idle are closed, idle strangers cannot hold the connection
cap, and ``send`` takes large messages."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
from loguru import logger

from corvid_actors.daemon.client import AdminClient
from corvid_actors.daemon.protocol import MAX_COUNT, RequestRejected, parse_request
from corvid_actors.daemon.socket_server import AdminSocketServer, SocketSettings

#: every real-time wait in this file is bounded by this
WAIT_S = 2.0


def raw(text: str) -> bytes:
    return text.encode() + b"\n"


@pytest.mark.parametrize(("line", "code", "says"), [
    # the reported holes: hmac raised on a lone surrogate, math.isfinite on a huge int
    (raw('{"cmd": "health", "token": "\\ud800"}'), "unauthorized", "token"),
    (raw('{"cmd": "extend", "args": {"session": "abcd", "minutes": 1' + "0" * 400 + '}}'), "bad_request",
     "minutes"),
    (raw('{"cmd": "extend", "args": {"session": "abcd", "minutes": NaN}}'), "bad_request", "not valid JSON"),
    (raw('{"cmd": "extend", "args": {"session": "abcd", "minutes": Infinity}}'), "bad_request", "not valid JSON"),
    (raw('{"cmd": "extend", "args": {"session": "abcd", "minutes": 1e999}}'), "bad_request", "minutes"),
    (raw('{"cmd": "extend", "args": {"session": "abcd", "minutes": 1e9}}'), "bad_request", "minutes"),
    (raw('{"cmd": "send", "args": {"session": "abcd", "text": "caf\\udce9"}}'), "bad_request", "valid Unicode"),
    (raw('{"cmd": "send", "args": {"session": "abcd", "text": "a\\u0000b"}}'), "bad_request", "NUL"),
    (raw('{"cmd": "stop", "args": {"session": "\\udfff"}}'), "bad_request", "valid Unicode"),
    (raw('{"cmd": "stop", "args": {"session": "' + "a" * 201 + '"}}'), "bad_request", "at most 200"),
    (raw('{"cmd": "sessions", "args": {"limit": 1' + "0" * 30 + '}}'), "bad_request", "limit"),
    (raw('{"cmd": "credits_grant", "args": {"participant": "bob", "amount": 10000000000000000000}}'),
     "bad_request", "amount"),
    (raw('{"cmd": "health", "id": 1' + "0" * 40 + '}'), "bad_request", '"id"'),
    (raw('{"cmd": "health", "id": "\\ud800"}'), "bad_request", '"id"'),
    (raw('{"cmd": "\\ud800"}'), "unknown_command", "unknown command"),
    (raw('{"cmd": "health", "args": {"x": ' + "[" * 50 + "]" * 50 + "}}"), "bad_request", "allowed: none"),
])
def test_every_malformed_value_is_rejected_by_the_validator(line, code, says):
    with pytest.raises(RequestRejected) as caught:
        parse_request(line, token="secret")  if code == "unauthorized" else parse_request(line)
    assert caught.value.code == code and says in caught.value.message
    json.dumps(caught.value.message).encode("utf-8")  # the reply itself is valid UTF-8 JSON


def test_in_range_values_still_pass():
    assert parse_request(raw(f'{{"cmd": "sessions", "args": {{"limit": {MAX_COUNT}}}}}')).args["limit"] == MAX_COUNT
    assert parse_request(raw('{"cmd": "send", "args": {"session": "abcd", "text": "café 💥"}}')).args["text"] \
        == "café 💥"


# --- the server -------------------------------------------------------------------------------


class Harness:
    def __init__(self, tmp_path: Path, gate: threading.Event | None = None, **settings) -> None:
        self.requests: list = []
        self.gate = gate
        self.entered = threading.Event()
        self.server = AdminSocketServer(tmp_path / "a.sock", self.handle, lambda s, sink: (lambda: None),
                                        SocketSettings(**settings))
        self.server.start()

    def handle(self, request):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(WAIT_S)
        self.requests.append(request)
        return {"cmd": request.cmd, "size": len(request.args.get("text", ""))}

    def connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(WAIT_S)
        sock.connect(str(self.server.path))
        return sock


@pytest.fixture
def logged():
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG")
    yield lines
    logger.remove(sink)


def read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_hostile_values_over_the_socket_get_replies_and_no_traceback(tmp_path, logged):
    h = Harness(tmp_path, token="secret")
    try:
        with h.connect() as sock:
            for line in (raw('{"id": 1, "cmd": "health", "token": "\\ud800"}'),
                         raw('{"id": 2, "cmd": "extend", "token": "secret", "args": {"session": "abcd", '
                             '"minutes": 1' + "0" * 400 + '}}'),
                         raw('{"id": 3, "cmd": "send", "token": "secret", "args": {"session": "abcd", '
                             '"text": "caf\\udce9"}}'),
                         b"\xff\xfe\n"):
                sock.sendall(line)
                reply = json.loads(read_line(sock))
                assert reply["ok"] is False and reply["error"]["code"] in ("unauthorized", "bad_request")
            sock.sendall(raw('{"id": 9, "cmd": "health", "token": "secret"}'))
            assert json.loads(read_line(sock)) == {"id": 9, "ok": True, "result": {"cmd": "health", "size": 0}}
    finally:
        h.server.close()
    assert not [line for line in logged if "Traceback" in line]
    assert [r.cmd for r in h.requests] == ["health"]


def test_a_connection_that_never_sends_a_line_is_closed_at_the_deadline(tmp_path):
    h = Harness(tmp_path, auth_timeout_s=0.2)
    try:
        with h.connect() as sock:
            reply = json.loads(read_line(sock))
            assert reply["error"]["code"] == "timeout" and "first request" in reply["error"]["message"]
            assert sock.recv(1) == b""  # closed
    finally:
        h.server.close()


def test_a_slow_drip_first_line_does_not_extend_the_deadline(tmp_path):
    h = Harness(tmp_path, auth_timeout_s=0.3)
    stop = threading.Event()
    try:
        with h.connect() as sock:
            def drip() -> None:
                for byte in b'{"cmd": "health"' * 10:
                    if stop.wait(0.05):
                        return
                    try:
                        sock.sendall(bytes([byte]))
                    except OSError:
                        return

            dripper = threading.Thread(target=drip)
            dripper.start()
            reply = json.loads(read_line(sock))
            stop.set()
            dripper.join(WAIT_S)
            assert reply["error"]["code"] == "timeout"
    finally:
        stop.set()
        h.server.close()


def test_an_idle_authenticated_connection_is_closed_after_the_idle_timeout(tmp_path):
    h = Harness(tmp_path, auth_timeout_s=5, idle_timeout_s=0.2)
    try:
        with h.connect() as sock:
            sock.sendall(raw('{"id": 1, "cmd": "health"}'))
            assert json.loads(read_line(sock))["ok"] is True
            reply = json.loads(read_line(sock))  # nothing more sent: the idle timeout ends it
            assert reply["error"]["code"] == "timeout" and "idle" in reply["error"]["message"]
            assert sock.recv(1) == b""
    finally:
        h.server.close()


def test_idle_unauthenticated_connections_cannot_lock_the_operator_out(tmp_path):
    h = Harness(tmp_path, max_connections=3, auth_timeout_s=30)
    squatters = [h.connect() for _ in range(3)]
    operators: list[AdminClient] = []
    try:
        for n in range(3):  # operators get in, and stay: the squatters go, oldest first
            operators.append(AdminClient(h.server.path, timeout_s=WAIT_S).connect())
            assert operators[-1].call("health") == {"cmd": "health", "size": 0}
            reply = json.loads(read_line(squatters[n]))
            assert reply["error"]["code"] == "busy" and "evicted" in reply["error"]["message"]
            assert squatters[n].recv(1) == b""
        # now every slot holds an operator: the idle one used longest ago makes room
        with AdminClient(h.server.path, timeout_s=WAIT_S) as late:
            assert late.call("health")["cmd"] == "health"
        assert operators[1].call("health")["cmd"] == "health"
    finally:
        for sock in squatters:
            sock.close()
        for client in operators:
            client.close()
        h.server.close()


def test_busy_connections_are_not_evicted(tmp_path):
    # a connection in the middle of a request is not idle: with nothing evictable the cap holds
    gate = threading.Event()
    h = Harness(tmp_path, gate=gate, max_connections=1)
    try:
        with h.connect() as busy:
            busy.sendall(raw('{"id": 1, "cmd": "health"}'))
            assert h.entered.wait(WAIT_S)  # mid-request now
            with h.connect() as late:
                assert json.loads(read_line(late))["error"]["code"] == "busy"
            gate.set()
            assert json.loads(read_line(busy))["ok"] is True
    finally:
        gate.set()
        h.server.close()


def test_send_takes_a_message_of_several_megabytes_other_requests_stay_small(tmp_path):
    h = Harness(tmp_path, max_request_bytes=1000, max_send_bytes=5 * 1024 * 1024)
    text = "é" * (2 * 1024 * 1024)  # 4 MiB of UTF-8
    try:
        with AdminClient(h.server.path, timeout_s=WAIT_S) as client:
            assert client.call("send", session="abcd", text=text) == {"cmd": "send", "size": len(text)}
            with pytest.raises(Exception, match="too_large"):
                client.call("sessions", status="x" * 2000)
            assert client.call("health")["cmd"] == "health"  # still usable
    finally:
        h.server.close()
