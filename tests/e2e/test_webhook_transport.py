"""The webhook transport end to end over loopback: a platform POSTs messages to the bot,
the real runtime runs the session against the Ollama stub through the real client, and
replies, approvals and command answers are POSTed (signed) to the platform's callback."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from corvid_actors.chat import ChatBridge, WebhookTransport
from corvid_actors.chat.webhook import SIGNATURE_HEADER, SignatureError, sign, verify
from corvid_actors.config import Config
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing.ollama_stub import OllamaStubServer

MODEL = "llama3.1:8b"
SECRET = "webhook-secret"
OWNER = "olivia"
HTTP_TIMEOUT_S = 5
#: the example bot starts in a fresh interpreter: imports and an SQLite file take a moment
EXAMPLE_START_TIMEOUT_S = 20
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat_bot.py"


class Platform:
    """The chat platform's side: receives the bot's callbacks, posts participants' messages."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        self.bad_signatures = 0
        self._lock = threading.Condition()
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with platform._lock:
                    try:
                        verify(SECRET, body, self.headers.get(SIGNATURE_HEADER), now=now_s())
                    except SignatureError:
                        platform.bad_signatures += 1
                    else:
                        platform.received.append(json.loads(body))
                    platform._lock.notify_all()
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def callback_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/corvid-replies"

    def texts(self, participant: str, kind: str | None = None) -> list[str]:
        with self._lock:
            return [m["text"] for m in self.received
                    if m["participant"] == participant and (kind is None or m["kind"] == kind)]

    def wait_for_reply(self, participant: str, timeout_s: float) -> list[str]:
        """For a bot in another process (real time): wait, bounded, for a reply."""
        with self._lock:
            self._lock.wait_for(lambda: any(m["participant"] == participant and m["kind"] == "reply"
                                            for m in self.received), timeout=timeout_s)
        return self.texts(participant, "reply")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def now_s() -> int:
    """Unix time as the bot sees it (frozen with the simulated clock, like the bot's)."""
    return int(datetime.now(UTC).timestamp())


def post(url: str, payload, *, secret: str | None = SECRET, raw: bytes | None = None,
         timestamp: int | None = None) -> tuple[int, dict]:
    body = raw if raw is not None else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    if secret:
        headers[SIGNATURE_HEADER] = sign(secret, body, now_s() if timestamp is None else timestamp)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def stub():
    with OllamaStubServer() as server:
        yield server


@pytest.fixture
def platform():
    p = Platform()
    yield p
    p.close()


@pytest.fixture
def bot(make_e2e, stub, platform):
    bots = []

    def make(*, tools=(), callback_url=None):
        cfg = Config().replace(credits={"free_credits_on_first_message": 10})
        e2e = make_e2e({"ollama": OllamaProvider(stub.url)}, cfg, with_credits=True,
                       is_owner={OWNER}.__contains__)
        agent = e2e.runtime.create_agent("chatty", provider="ollama", model=MODEL, permission_mode="default",
                                               system_prompt="You are a chat bot.", tool_permissions=list(tools))
        transport = WebhookTransport(callback_url or platform.callback_url, secret=SECRET)
        bridge = ChatBridge(e2e.runtime, transport, agent_id=agent.id, project_id=e2e.project.id,
                            is_owner={OWNER}.__contains__).start()
        bots.append(bridge)
        e2e.bridge, e2e.transport = bridge, transport
        return e2e

    yield make
    for bridge in bots:
        bridge.runtime.shutdown()
        bridge.stop()


def message(participant, text, *, channel="room-1", id=None):
    body = {"channel": channel, "participant": participant, "text": text}
    if id is not None:
        body["id"] = id
    return body


def test_a_posted_message_is_persisted_and_answered_on_the_callback(bot, stub, platform):
    e2e = bot()
    stub.add_reply("Hello from the model!")
    status, answer = post(e2e.transport.url, message("alice", "hi there", id="msg-1"))
    assert (status, answer) == (202, {"accepted": True, "outcome": "delivered"})
    sid = e2e.bridge.conversation("room-1", "alice").session_id
    assert ("user", "hi there") in e2e.runtime.internals.store.recent_messages(sid, 5)  # persisted before the 202
    e2e.runtime.settle()
    assert platform.texts("alice", "reply") == ["Hello from the model!"]
    assert platform.texts("alice", "notice")[0].startswith("Welcome! You have 10 free credits")
    assert platform.received[-1]["channel"] == "room-1" and platform.received[-1]["session_id"] == sid
    assert platform.bad_signatures == 0
    assert stub.chat_requests[-1].json["messages"][-1]["content"] == "hi there"
    assert e2e.runtime.credit_balance("alice") == 9
    # the platform redelivers the same message (signed anew): ignored
    assert post(e2e.transport.url, message("alice", "hi there", id="msg-1"),
                timestamp=now_s() + 1)[1]["outcome"] == "duplicate"
    # the very same signed request again is a replay
    assert post(e2e.transport.url, message("alice", "hi there", id="msg-1"))[0] == 409


def test_approvals_over_the_webhook_only_from_the_right_participant(bot, stub, platform):
    e2e = bot(tools=["list_files"])
    stub.add_tool_calls([("list_files", {"path": "."})])
    stub.add_reply("Your project has a README.")
    post(e2e.transport.url, message("alice", "what is in my project?"))
    e2e.runtime.settle()
    [request] = platform.texts("alice", "approval")
    approval_id = re.match(r"\[APPROVE\?:(\w+)\] List files", request).group(1)

    assert post(e2e.transport.url, message("mallory", f"yes {approval_id}"))[1]["outcome"] == "rejected"
    e2e.runtime.settle()
    assert "not yours to answer" in platform.texts("mallory")[0]
    assert len(stub.chat_requests) == 1  # the tool did not run

    assert post(e2e.transport.url, message("alice", f"yes {approval_id}"))[1]["outcome"] == "approved"
    e2e.runtime.settle()
    assert platform.texts("alice", "reply") == ["Your project has a README."]
    tool_results = [m for m in stub.chat_requests[-1].json["messages"] if m["role"] == "tool"]
    assert "README.md" in tool_results[0]["content"]


def test_commands_over_the_webhook(bot, platform):
    e2e = bot()
    post(e2e.transport.url, message("alice", "hello"))
    e2e.runtime.settle()
    assert post(e2e.transport.url, message("alice", "/credits"))[1]["outcome"] == "command"
    e2e.runtime.settle()
    [credits] = platform.texts("alice", "command")
    assert credits.startswith("Credits: 9 (1 per reply)")


def test_bad_requests_are_refused(bot):
    e2e = bot()
    url = e2e.transport.url
    assert post(url, message("alice", "hi"), secret=None)[0] == 401
    assert post(url, message("alice", "hi"), secret="wrong")[0] == 401
    assert post(url, None, raw=b"{not json")[0] == 400
    assert post(url, {"channel": "room-1", "text": "no participant"})[0] == 400
    assert post(url, message("a" * 201, "too long an id"))[0] == 400
    assert post(url.replace("/messages", "/elsewhere"), message("alice", "hi"))[0] == 404
    with urllib.request.urlopen(url.replace("/messages", "/healthz"), timeout=HTTP_TIMEOUT_S) as response:
        assert response.status == 200
    assert e2e.runtime.internals.store.list_sessions() == []  # nothing refused made a session


def test_an_unreachable_callback_never_blocks_the_bot(bot, stub, platform):
    e2e = bot(callback_url="http://127.0.0.1:9/unreachable")  # discard port: connection refused
    stub.add_reply("first")
    stub.add_reply("second")
    assert post(e2e.transport.url, message("alice", "one"))[0] == 202
    e2e.runtime.settle()
    assert post(e2e.transport.url, message("alice", "two"))[0] == 202
    e2e.runtime.settle()
    sid = e2e.bridge.conversation("room-1", "alice").session_id
    assert [r.event.content for r in e2e.recorder.of(sid, "assistant")] == ["first", "second"]
    # the welcome, the low-credit warning (10 free credits: under the threshold of 50), both replies
    assert e2e.bridge.stats["failed"] == 4
    assert platform.received == []


def test_the_example_bot_serves_the_webhook_in_its_own_process(platform, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "ANTHROPIC_", "CORVID_"))}
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--transport", "webhook", "--port", "0", "--callback-url",
         platform.callback_url, "--secret", SECRET, "--data-dir", str(tmp_path / "bot")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        url = None
        while url is None:
            line = lines.get(timeout=EXAMPLE_START_TIMEOUT_S)
            found = re.search(r"Listening on (http://\S+)", line)
            url = found.group(1) if found else None
        answer = post(url, message("alice", "hello bot"))
        assert answer == (202, {"accepted": True, "outcome": "delivered"})
        replies = platform.wait_for_reply("alice", EXAMPLE_START_TIMEOUT_S)
        assert replies == ["(stub model) You said: hello bot. Mention your files to see a tool approval."]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=EXAMPLE_START_TIMEOUT_S)
        finally:
            proc.kill()
    assert proc.returncode == 0
    assert platform.texts("alice", "notice")[-1].startswith("The bot is shutting down")  # told before it stopped
