"""The webhook under attack: replayed signed requests (also across a restart), bodies
announced but never sent, lying Content-Lengths, slow drips, connection floods, expired,
malformed and legacy signatures. Each answer is a JSON error with the right status, and
nothing reaches the bridge that should not."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest
from loguru import logger

from corvid_actors.chat import ChatBridge, WebhookTransport
from corvid_actors.chat.webhook import SIGNATURE_HEADER, SignatureError, sign, sign_legacy, verify
from corvid_actors.config import Config
from corvid_actors.testing import SimClock, sim_runtime

from .conftest import OWNER

SECRET = "webhook-secret"
#: every real-time wait here is bounded by this
WAIT_S = 3.0


def now_s() -> int:
    return int(datetime.now(UTC).timestamp())


def signed(payload: dict, *, secret: str = SECRET, timestamp: int | None = None) -> tuple[bytes, str]:
    body = json.dumps(payload).encode()
    return body, sign(secret, body, now_s() if timestamp is None else timestamp)


def post(url: str, body: bytes, signature: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers[SIGNATURE_HEADER] = signature
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def raw_exchange(transport: WebhookTransport, request: bytes) -> tuple[int, dict]:
    """Send raw bytes; read the answer (status, JSON body)."""
    with socket.create_connection((transport.host, transport._server.server_address[1]), timeout=WAIT_S) as sock:
        sock.sendall(request)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed without an answer: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int([line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][0])
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split()[1]), json.loads(rest[:length])


class Recorder:
    """A stand-in for the bridge: records what got through."""

    def __init__(self) -> None:
        self.messages: list = []

    def __call__(self, message) -> str:
        self.messages.append(message)
        return "delivered"


@pytest.fixture
def served():
    started: list[WebhookTransport] = []

    def make(**kwargs) -> tuple[WebhookTransport, Recorder]:
        recorder = Recorder()
        transport = WebhookTransport("http://127.0.0.1:9/unused", secret=kwargs.pop("secret", SECRET), **kwargs)
        transport.start(recorder)
        started.append(transport)
        return transport, recorder

    yield make
    for transport in started:
        transport.stop()


MESSAGE = {"channel": "room", "participant": "alice", "text": "hi"}


# --- signatures -------------------------------------------------------------------------------


def test_signature_scheme_round_trip_and_refusals():
    body = b'{"x": 1}'
    header = sign(SECRET, body, 1_000_000)
    assert header.startswith("t=1000000,v1=")
    assert verify(SECRET, body, header, now=1_000_100).key.startswith("v1:")
    refusals = [
        (None, "missing"),
        ("garbage", "must look like"),
        ("t=1000000", "at least one v1"),
        ("t=abc,v1=" + "0" * 64, "whole seconds"),
        ("t=1000000,v1=XYZ", "64 lowercase hex"),
        (sign(SECRET, body, 1_000_000 - 301), "more than 300 s"),
        (sign(SECRET, body, 1_000_000 + 301), "more than 300 s"),   # from the future too
        (sign("other", body, 1_000_000), "wrong"),
        (sign(SECRET, body + b" ", 1_000_000), "wrong"),
        (sign_legacy(SECRET, body), "not accepted"),
    ]
    for bad, says in refusals:
        with pytest.raises(SignatureError, match=says):
            verify(SECRET, body, bad, now=1_000_000)
    # a rotated secret: either v1 may match
    two = header + ",v1=" + sign("new-secret", body, 1_000_000).split("v1=")[1]
    assert verify("new-secret", body, two, now=1_000_000)
    assert verify(SECRET, body, sign_legacy(SECRET, body), now=1_000_000, allow_legacy=True).legacy


def test_expired_and_unsigned_requests_are_refused_before_the_body_is_read(served):
    transport, recorder = served()
    body, header = signed(MESSAGE, timestamp=now_s() - 3600)
    # announce a body but never send it: the answer comes at once, from the header alone
    head = (f"POST /messages HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
            f"{SIGNATURE_HEADER}: {header}\r\n\r\n").encode()
    assert raw_exchange(transport, head)[0] == 401
    assert raw_exchange(transport, f"POST /messages HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n".encode())[0] \
        == 401
    assert recorder.messages == []


def test_legacy_signatures_only_when_configured(served):
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    logger.enable("corvid_actors")  # a library logs nothing until its host enables it
    try:
        strict, _ = served()
        lenient, recorder = served(allow_legacy_signatures=True)
    finally:
        logger.disable("corvid_actors")
        logger.remove(sink)
    body = json.dumps(MESSAGE).encode()
    assert post(strict.url, body, sign_legacy(SECRET, body))[0] == 401
    assert post(lenient.url, body, sign_legacy(SECRET, body)) == (202, {"accepted": True, "outcome": "delivered"})
    assert post(lenient.url, body, sign_legacy(SECRET, body))[0] == 409  # still once only
    assert len(recorder.messages) == 1
    assert any("legacy body-only signatures" in line for line in lines)


# --- replays --------------------------------------------------------------------------------------


def test_a_replayed_request_is_refused(served):
    transport, recorder = served()
    body, header = signed(MESSAGE)
    assert post(transport.url, body, header)[0] == 202
    for _ in range(4):
        assert post(transport.url, body, header) == (409, {"error": "replayed request: this signature was "
                                                                    "already accepted"})
    assert len(recorder.messages) == 1
    # the same message signed again (a genuine resend, a later timestamp) is new to the transport
    assert post(transport.url, *signed(MESSAGE, timestamp=now_s() + 1))[0] == 202


def _bot(clock, url):
    cfg = Config().replace(credits={"free_credits_on_first_message": 0})
    rt = sim_runtime(clock, config=cfg, store_url=url, with_credits=True, is_owner={OWNER}.__contains__)
    transport = WebhookTransport("http://127.0.0.1:9/unused", secret=SECRET)
    bridge = ChatBridge(rt, transport, is_owner={OWNER}.__contains__).start()
    return rt, transport, bridge


def test_a_captured_grant_cannot_be_replayed_even_after_a_restart(tmp_path, sim_clock):
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    rt, transport, bridge = _bot(sim_clock, url)
    captured = signed({"channel": "room", "participant": OWNER, "text": "/grant mallory 500"})
    try:
        assert post(transport.url, *captured) == (202, {"accepted": True, "outcome": "command"})
        for _ in range(4):  # the reported attack: four replays granted 2,000 credits
            assert post(transport.url, *captured)[0] == 409
        assert rt.credit_balance("mallory") == 500
    finally:
        rt.shutdown()
        bridge.stop()
    sim_clock.close()

    clock = SimClock()  # the restarted bot: a new process, the same database, time has moved on a little
    clock.advance(60)
    rt, transport, bridge = _bot(clock, url)
    try:
        assert post(transport.url, *captured)[0] == 409
        assert rt.credit_balance("mallory") == 500
        assert len(rt.credit_transactions("mallory", 10)) == 1
    finally:
        rt.shutdown()
        bridge.stop()
        clock.close()


def test_a_request_refused_by_a_stopping_bot_may_be_retried(served):
    transport, _ = served()
    transport._handler = None  # the bridge is stopping: 503, and the signature is not spent
    body, header = signed(MESSAGE)
    assert post(transport.url, body, header)[0] == 503
    recorder = Recorder()
    transport._handler = recorder
    assert post(transport.url, body, header)[0] == 202


# --- Content-Length, timeouts and the connection cap ----------------------------------------------


@pytest.mark.parametrize(("length_header", "status"), [
    ("Content-Length: -1\r\n", 400),
    ("", 400),
    ("Content-Length: abc\r\n", 400),
    ("Content-Length: 1e3\r\n", 400),
    ("Content-Length: 5\r\nContent-Length: 6\r\n", 400),
    ("Transfer-Encoding: chunked\r\n", 400),
    ("Content-Length: 99999999999\r\n", 413),
    ("Content-Length: 65537\r\n", 413),
])
def test_bad_content_lengths_are_refused_before_reading(served, length_header, status):
    transport, recorder = served()
    answer = raw_exchange(transport, f"POST /messages HTTP/1.1\r\nHost: x\r\n{length_header}\r\n".encode())
    assert answer[0] == status and "error" in answer[1]
    assert recorder.messages == []


def test_a_body_that_never_arrives_gets_408(served):
    transport, recorder = served(read_timeout_s=0.3)
    body, header = signed(MESSAGE)
    head = (f"POST /messages HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
            f"{SIGNATURE_HEADER}: {header}\r\n\r\n").encode()
    status, answer = raw_exchange(transport, head + body[:5])
    assert status == 408 and "0.3 s" in answer["error"]
    assert recorder.messages == []


def test_a_slow_drip_does_not_extend_the_deadline(served):
    transport, _ = served(read_timeout_s=0.3)
    stop = threading.Event()
    with socket.create_connection((transport.host, transport._server.server_address[1]), timeout=WAIT_S) as sock:
        def drip() -> None:
            for byte in b"POST /messages HTTP/1.1\r\nX-Padding: " + b"a" * 100:
                if stop.wait(0.05):
                    return
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    return

        dripper = threading.Thread(target=drip)
        dripper.start()
        try:
            assert sock.recv(1) == b""  # closed at the deadline, not kept open by the drip
        finally:
            stop.set()
            dripper.join(WAIT_S)


def test_connections_beyond_the_cap_get_429_and_the_server_recovers(served):
    transport, recorder = served(max_connections=3, read_timeout_s=WAIT_S)
    port = transport._server.server_address[1]
    idle = [socket.create_connection((transport.host, port), timeout=WAIT_S) for _ in range(3)]
    try:
        # a thread per held connection: wait until all three are being served
        extra = socket.create_connection((transport.host, port), timeout=WAIT_S)
        with extra:
            status, answer = read_answer(extra)
        assert status == 429 and "too many connections" in answer["error"]
    finally:
        for sock in idle:
            sock.close()
    # the held connections are gone: requests are served again
    body, header = signed(MESSAGE)
    for _ in range(50):
        try:
            status, _ = post(transport.url, body, header)
        except urllib.error.URLError:
            # the server still counted a held connection, answered 429 and closed before
            # reading the body: the client sees a broken pipe. Still at the cap: try again.
            status = 429
            continue
        if status != 429:
            break
    assert status == 202 and len(recorder.messages) == 1


def test_many_half_open_connections_do_not_grow_threads_without_bound(served):
    transport, _ = served(max_connections=5, read_timeout_s=0.5)
    port = transport._server.server_address[1]
    before = threading.active_count()
    socks = [socket.create_connection((transport.host, port), timeout=WAIT_S) for _ in range(60)]
    try:
        for sock in socks:
            sock.sendall(b"POST /messages HTTP/1.1\r\nContent-Length: 10\r\n")
        assert threading.active_count() - before <= 5 + 1
    finally:
        for sock in socks:
            sock.close()


def test_invalid_unicode_fields_are_400_not_500(served):
    transport, recorder = served()
    for text in ('"caf\\udce9"', '"a\\u0000b"'):
        body = ('{"channel": "room", "participant": "alice", "text": ' + text + "}").encode()
        assert post(transport.url, body, sign(SECRET, body, now_s()))[0] == 400
    body = b'{"channel": "room", "participant": "alice", "text": "hi", "id": [1]}'
    assert post(transport.url, body, sign(SECRET, body, now_s()))[0] == 400
    assert recorder.messages == []



def test_the_guides_signing_example_is_accepted(served):
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "docs" / "site" / "chat" / "chat-bridge.md").read_text()
    start = readme.index("```python\nimport hashlib, hmac") + len("```python\n")
    code = readme[start:readme.index("```", start)]
    definition = code[:code.index("\npost_signed(")]
    namespace: dict = {}
    exec(definition, namespace)  # noqa: S102 - the documented example, as a reader would run it
    transport, recorder = served(secret="s3cret")
    assert namespace["post_signed"](transport.url, "s3cret", {"channel": "room-1", "participant": "alice",
                                                            "text": "hi", "id": "m-1"}) == 202
    assert [m.text for m in recorder.messages] == ["hi"]


def test_an_early_refusal_of_a_sent_body_still_reaches_the_client(served):
    # refused before the body is read; the body is swallowed (bounded) so the answer is not
    # lost to a connection reset
    transport, recorder = served()
    body = json.dumps({**MESSAGE, "text": "x" * 60_000}).encode()
    for _ in range(20):
        assert post(transport.url, body, None)[0] == 401
        assert post(transport.url, body, sign(SECRET, body, now_s() - 3600))[0] == 401
    assert recorder.messages == []


def test_accepted_connections_have_nagle_off(served):
    # uvicorn writes the headers and the body in two sends: with Nagle on, the body would wait
    # for the client's delayed ACK of the headers (~40 ms an answer)
    transport, _ = served()
    port = transport._server.server_address[1]
    with socket.create_connection((transport.host, port), timeout=WAIT_S) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_answer(sock)[0] == 200  # the connection stays open (keep-alive)
        server = transport._server._server
        assert server is not None
        (connection,) = server.server_state.connections
        accepted = connection.transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
