"""One listener: the chat webhook mounted on the daemon's HTTP listener (issue 39 item 1).
A signed message gets through, an unsigned or replayed one does not, and the API beside it
still wants its token; a mount may not shadow the listener's own paths."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import anyio
import httpx
import pytest

from corvid_actors.chat import WebhookTransport
from corvid_actors.chat.signatures import SIGNATURE_HEADER, sign
from corvid_actors.db.replays import MemoryReplayStore
from corvid_actors.http import HttpListener
from corvid_actors.http.routes import PREFIX
from tests.http.test_sse import WAIT_S

SECRET = "mounted-secret"


def test_the_webhook_mounted_on_the_listener_checks_signatures_and_the_api_keeps_its_token(stack):
    received: list = []
    transport = WebhookTransport("http://127.0.0.1:9/unused", secret=SECRET, serve=False,
                                 replays=MemoryReplayStore())
    transport.start(lambda message: received.append(message) or "delivered")
    config = stack.runtime.config.replace(http={"listen": "127.0.0.1:0"})
    listener = HttpListener(stack.gateway, config.http, stack.runtime.clock, mounts={"/webhook": transport.asgi_app()})
    listener.start()
    try:
        url = f"{listener.url}/webhook/messages"
        body = json.dumps({"channel": "room", "participant": "alice", "text": "hi"}).encode()
        signature = sign(SECRET, body, int(datetime.now(UTC).timestamp()))
        ok = httpx.post(url, content=body, headers={SIGNATURE_HEADER: signature}, timeout=WAIT_S)
        assert (ok.status_code, ok.json()) == (202, {"accepted": True, "outcome": "delivered"})
        assert httpx.post(url, content=body, headers={SIGNATURE_HEADER: signature}, timeout=WAIT_S).status_code == 409
        unsigned = httpx.post(url, content=body, timeout=WAIT_S)
        assert unsigned.status_code == 401 and "error" in unsigned.json()
        assert [m.text for m in received] == ["hi"]
        assert httpx.get(f"{listener.url}/webhook/healthz", timeout=WAIT_S).json() == {"ok": True}
        # the API beside it: no token, no answer; the webhook's signature is no token
        assert httpx.get(f"{listener.url}{PREFIX}/sessions", timeout=WAIT_S).status_code == 401
        assert httpx.get(f"{listener.url}{PREFIX}/sessions", headers={SIGNATURE_HEADER: signature},
                         timeout=WAIT_S).status_code == 401
        authed = httpx.get(f"{listener.url}{PREFIX}/sessions", headers=stack.headers(stack.read), timeout=WAIT_S)
        assert authed.status_code == 200
    finally:
        listener.stop()
        transport.stop()
    with pytest.raises(RuntimeError, match="not serving"):
        _ = transport.url  # serve=False: the transport never had a server of its own


@pytest.mark.parametrize("prefix", ["/", "/healthz", PREFIX, f"{PREFIX}/sessions", "webhook"])
def test_a_mount_may_not_shadow_the_listeners_own_paths(stack, prefix):
    with pytest.raises(ValueError, match="path prefix"):
        HttpListener(stack.gateway, stack.runtime.config.http, stack.runtime.clock, mounts={prefix: object()})


@pytest.mark.anyio
async def test_the_mounted_webhook_caps_requests_in_progress_per_client():
    # mounted on a host's server the webhook cannot count connections: it caps the requests
    entered: list[str] = []
    release = threading.Event()

    def slow_handler(message) -> str:
        entered.append(message.text)
        assert release.wait(WAIT_S)
        return "delivered"

    transport = WebhookTransport("http://127.0.0.1:9/unused", secret=SECRET, serve=False,
                                 replays=MemoryReplayStore(), max_connections=8, max_connections_per_client=2)
    transport.start(slow_handler)
    app = transport.asgi_app()

    def signed(text: str) -> tuple[bytes, dict[str, str]]:
        body = json.dumps({"channel": "room", "participant": "alice", "text": text}).encode()
        return body, {SIGNATURE_HEADER: sign(SECRET, body, int(datetime.now(UTC).timestamp()))}

    answers: dict[str, int] = {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bot") as client:
        async def post(text: str) -> None:
            body, headers = signed(text)
            answers[text] = (await client.post("/messages", content=body, headers=headers)).status_code

        async with anyio.create_task_group() as group:
            group.start_soon(post, "one")
            group.start_soon(post, "two")
            with anyio.fail_after(WAIT_S):
                while len(entered) < 2:
                    await anyio.sleep(0.01)
            body, headers = signed("three")
            third = await client.post("/messages", content=body, headers=headers)
            release.set()
        assert third.status_code == 429 and "from your address" in third.json()["error"]
        assert answers == {"one": 202, "two": 202}
        body, headers = signed("four")  # the slots came back
        assert (await client.post("/messages", content=body, headers=headers)).status_code == 202
    assert sorted(entered) == ["four", "one", "two"]
    transport.stop()
