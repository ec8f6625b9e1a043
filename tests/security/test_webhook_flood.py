"""Issue 33, break 8: one client's connection flood must not lock every other client out
of the webhook. A client address holds idle connections up to the server's global cap;
another address's signed delivery is still accepted at once, and the flooder, once its
connections close, can deliver again. Loopback gives distinct client addresses: the
flooder's sockets are bound to 127.0.0.2, the legitimate platform's to 127.0.0.1."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from corvid_actors.chat import WebhookTransport
from corvid_actors.chat.webhook import SIGNATURE_HEADER, sign
from corvid_actors.config import Config

SECRET = "flood-secret"
PLATFORM = "127.0.0.1"
FLOODER = "127.0.0.2"
#: every real-time wait here is bounded by this; idle connections outlive the test
WAIT_S = 3.0
#: the test's own bound on each socket read that should answer at once
ANSWER_S = 1.0


class Recorder:
    """A stand-in for the bridge: records the texts that got through."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, message) -> str:
        self.texts.append(message.text)
        return "delivered"


@pytest.fixture
def served() -> Iterator:
    started: list[WebhookTransport] = []

    def make(**kwargs) -> tuple[WebhookTransport, Recorder]:
        recorder = Recorder()
        # read_timeout_s outlives the test: idle connections stay held until closed
        transport = WebhookTransport("http://127.0.0.1:9/unused", secret=SECRET, read_timeout_s=WAIT_S, **kwargs)
        transport.start(recorder)
        started.append(transport)
        return transport, recorder

    yield make
    for transport in started:
        transport.stop()


def connect(transport: WebhookTransport, source: str) -> socket.socket:
    """A TCP connection to the webhook from the client address ``source``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(ANSWER_S)
    sock.bind((source, 0))
    sock.connect((transport.host, transport._server.server_address[1]))
    return sock


def read_answer(sock: socket.socket) -> tuple[int, dict]:
    """(status, JSON body) of one HTTP answer; raises TimeoutError if none comes."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed without an answer: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split()[1]), json.loads(rest[:length])


def deliver(transport: WebhookTransport, source: str, text: str) -> tuple[int, dict]:
    """POST one signed message from ``source`` on a new connection: (status, answer)."""
    body = json.dumps({"channel": "room", "participant": "alice", "text": text}).encode()
    request = (f"POST {transport.path} HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n{SIGNATURE_HEADER}: {sign(SECRET, body, int(time.time()))}\r\n"
               "Connection: close\r\n\r\n").encode() + body
    with connect(transport, source) as sock:
        try:
            sock.sendall(request)
        except OSError as exc:  # refused before the body was read: the answer is still readable
            if not isinstance(exc, BrokenPipeError | ConnectionResetError):
                raise
        return read_answer(sock)


def redeliver(transport: WebhookTransport, source: str, text: str) -> int:
    """:func:`deliver`'s status, where a reset counts as 429: a refusal closes the connection
    with the body unread, and the kernel's reset may overtake the 429 it sent."""
    try:
        return deliver(transport, source, text)[0]
    except ConnectionResetError:
        return 429


def flood(transport: WebhookTransport, stack: ExitStack, count: int) -> list[socket.socket]:
    """``count`` idle connections from the flooder, closed when ``stack`` closes."""
    return [stack.enter_context(connect(transport, FLOODER)) for _ in range(count)]


def test_one_clients_flood_does_not_stop_anothers_delivery(served):
    transport, recorder = served()
    with ExitStack() as stack:
        flood(transport, stack, transport.max_connections)  # up to the global cap, all idle
        started = time.monotonic()
        status, answer = deliver(transport, PLATFORM, "still here")
        elapsed = time.monotonic() - started
    assert (status, answer) == (202, {"accepted": True, "outcome": "delivered"})
    assert recorder.texts == ["still here"]
    assert elapsed < ANSWER_S  # at once, not after the flood's read deadline


def test_a_client_over_its_cap_gets_429_until_its_connections_close(served):
    transport, recorder = served(max_connections=8, max_connections_per_client=3)
    with ExitStack() as stack:
        flood(transport, stack, 3)
        with connect(transport, FLOODER) as extra:
            status, answer = read_answer(extra)
        assert status == 429
        assert answer["error"] == "too many connections from your address (at most 3); retry shortly"
        # the other client is under both caps
        assert deliver(transport, PLATFORM, "other client")[0] == 202
    # the flood is closed: its slots come back as the server threads see the connections end
    deadline = time.monotonic() + WAIT_S
    while (status := redeliver(transport, FLOODER, "flooder again")) == 429 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert status == 202
    assert recorder.texts == ["other client", "flooder again"]


def test_the_global_cap_still_holds_across_clients(served):
    transport, _ = served(max_connections=4, max_connections_per_client=2)
    with ExitStack() as stack:
        flood(transport, stack, 2)
        stack.enter_context(connect(transport, "127.0.0.3"))
        stack.enter_context(connect(transport, "127.0.0.3"))
        with connect(transport, PLATFORM) as extra:
            status, answer = read_answer(extra)
    assert status == 429
    assert answer["error"] == "too many connections (at most 4); retry shortly"


def test_the_per_client_cap_is_the_webhook_config_setting():
    config = Config()
    assert WebhookTransport.from_config("http://127.0.0.1:9/unused", config).max_connections_per_client \
        == config.webhook.max_connections_per_client == config.webhook.max_connections // 4
    narrowed = config.replace(webhook={"max_connections_per_client": 2})
    assert WebhookTransport.from_config("http://127.0.0.1:9/unused", narrowed).max_connections_per_client == 2
    with pytest.raises(ValueError, match="must be at least 1"):
        WebhookTransport("http://127.0.0.1:9/unused", max_connections_per_client=0)
