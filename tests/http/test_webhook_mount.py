"""One listener: the chat webhook mounted on the daemon's HTTP listener (issue 39 item 1).
A signed message gets through, an unsigned or replayed one does not, and the API beside it
still wants its token; a mount may not shadow the listener's own paths."""

from __future__ import annotations

import json
from datetime import UTC, datetime

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
