"""The webhook as an ASGI application on Starlette: what a :class:`~corvid_actors.chat.webhook.WebhookTransport`
serves on its own uvicorn server (:mod:`corvid_actors.chat.webhook_server`), and what a host mounts
on its own Starlette/FastAPI app or on the daemon's HTTP listener (``transport.asgi_app()``).

Each POST is checked in the order the stdlib server checked it — the ``Content-Length`` (one
non-negative whole number, at most ``max_body_bytes``; chunked bodies refused), the path, the
signature header's timestamp — before a byte of the body is read; the body is then read against
the request's deadline (``read_timeout_s`` from the start of the request: 408 past it) and never
beyond the announced length, and handed to the transport's parser on a worker thread (the bridge's
handler blocks). Every answer is JSON. The transport is reached through :class:`WebhookEndpoint`
only: this module imports Starlette, never the transport's module (no import cycle).
"""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from corvid_actors.chat.signatures import SIGNATURE_HEADER, SignatureError

#: the ASGI scope extension where the webhook's own server puts the request's deadline (the
#: event loop's time by which the whole request must have arrived, counted from its first byte)
DEADLINE_EXTENSION = "corvid.request_deadline"
_DIGITS = re.compile(r"[0-9]{1,15}")


class RequestError(Exception):
    """Answer ``status`` with ``message`` (and close the connection unless the body is swallowed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class WebhookEndpoint(Protocol):
    """What the ASGI app needs of the transport (:class:`~corvid_actors.chat.webhook.WebhookTransport`)."""

    path: str
    max_body_bytes: int
    read_timeout_s: float
    max_connections: int
    max_connections_per_client: int

    def _precheck(self, signature: str | None) -> None:
        """Raises :class:`SignatureError` when the header alone condemns the request."""

    def _incoming(self, body: bytes, signature: str | None) -> tuple[int, dict[str, Any]]: ...


def answer(status: int, payload: dict[str, Any], *, close: bool = False) -> Response:
    headers = {"Connection": "close"} if close else None
    return JSONResponse(payload, status_code=status, headers=headers)


class Caps:
    """At most ``max_total`` at once, and at most ``max_per_client`` from one client address:
    the webhook's connection caps on its own server (``webhook_server``) and its request
    caps when mounted (:class:`RequestCaps`). Not locked: the caller serialises."""

    def __init__(self, max_total: int, max_per_client: int) -> None:
        self.max_total = max_total
        self.max_per_client = max_per_client
        self.active = 0
        self.by_client: dict[str, int] = {}

    def admit(self, client: str) -> str | None:
        """None (counted) or why ``client``'s new connection or request is refused."""
        if self.active >= self.max_total:
            return f"too many connections (at most {self.max_total}); retry shortly"
        if self.by_client.get(client, 0) >= self.max_per_client:
            return f"too many connections from your address (at most {self.max_per_client}); retry shortly"
        self.active += 1
        self.by_client[client] = self.by_client.get(client, 0) + 1
        return None

    def release(self, client: str) -> None:
        self.active -= 1
        left = self.by_client[client] - 1
        if left:
            self.by_client[client] = left
        else:
            del self.by_client[client]


class RequestCaps:
    """ASGI middleware: at most ``max_requests`` requests in progress, and at most ``per_client``
    from one client address; more are answered a JSON 429 at once. On the transport's own server
    the connection caps come first (a request needs a connection); mounted on another server,
    whose connections the webhook cannot count, this is the cap that holds."""

    def __init__(self, app: ASGIApp, max_requests: int, per_client: int) -> None:
        self.app = app
        self.caps = Caps(max_requests, per_client)
        self._lock = threading.Lock()  # one app may be mounted on servers of several loops

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = str((scope.get("client") or ("",))[0])
        with self._lock:
            refusal = self.caps.admit(client)
        if refusal is not None:
            response = JSONResponse({"error": refusal}, status_code=429,
                                    headers={"Retry-After": "1", "Connection": "close"})
            await response(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            with self._lock:
                self.caps.release(client)


def create_webhook_app(endpoint: WebhookEndpoint) -> Starlette:
    """The webhook's application: ``POST <endpoint.path>`` and ``GET /healthz``; anything else
    is a JSON 404 (or 405). :class:`RequestCaps` bounds the requests in progress."""

    async def receive_message(request: Request) -> Response:
        deadline = _deadline(request, endpoint.read_timeout_s)
        signature = request.headers.get(SIGNATURE_HEADER)
        try:
            length = _content_length(request, endpoint.max_body_bytes)
            try:
                endpoint._precheck(signature)
            except SignatureError as exc:
                raise RequestError(401, str(exc)) from None
            body = await _read_body(request, length, deadline, endpoint.read_timeout_s)
        except RequestError as exc:
            # a 401 leaves the (size-checked) body to the server, which reads and drops it
            # before the next request: closing with unread data would reset the connection and
            # the client could lose the answer
            return answer(exc.status, {"error": exc.message}, close=exc.status != 401)
        status, payload = await run_in_threadpool(endpoint._incoming, body, signature)
        return answer(status, payload)

    async def healthz(request: Request) -> Response:
        return answer(200, {"ok": True})

    async def refuse(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 404 and request.method == "POST":
            message = f"POST messages to {endpoint.path}"
            try:
                _content_length(request, endpoint.max_body_bytes)  # 400/413 before 404, as before
            except RequestError as bad:
                return answer(bad.status, {"error": bad.message}, close=True)
            return answer(404, {"error": message}, close=False)
        return answer(status, {"error": "not found" if status == 404 else str(getattr(exc, "detail", exc))},
                      close=True)

    return Starlette(routes=[Route(endpoint.path, receive_message, methods=["POST"]),
                             Route("/healthz", healthz, methods=["GET"])],
                     exception_handlers={HTTPException: refuse},
                     middleware=[Middleware(RequestCaps, max_requests=endpoint.max_connections,
                                            per_client=endpoint.max_connections_per_client)])


def _deadline(request: Request, read_timeout_s: float) -> float:
    """The loop time the request's body must have arrived by: the webhook's own server counts
    from the request's first byte; on another server (a mount) from the moment the app saw it."""
    given = request.scope.get("extensions", {}).get(DEADLINE_EXTENSION)
    return float(given) if given is not None else asyncio.get_running_loop().time() + read_timeout_s


def _content_length(request: Request, max_body_bytes: int) -> int:
    if request.headers.get("transfer-encoding"):
        raise RequestError(400, "chunked bodies are not accepted: send a Content-Length")
    values = request.headers.getlist("content-length")
    if not values:
        raise RequestError(400, "a Content-Length header is required")
    if len(set(values)) != 1 or not _DIGITS.fullmatch(values[0].strip()):
        raise RequestError(400, "Content-Length must be one non-negative whole number")
    length = int(values[0])
    if length > max_body_bytes:
        raise RequestError(413, f"body over {max_body_bytes} bytes")
    return length


async def _read_body(request: Request, length: int, deadline: float, read_timeout_s: float) -> bytes:
    """The body, read while it streams in: never more than ``length`` bytes, all of it by ``deadline``."""
    chunks: list[bytes] = []
    got = 0

    async def collect() -> None:
        nonlocal got
        async for chunk in request.stream():
            got += len(chunk)
            if got > length:
                raise RequestError(413, f"the body is longer than its Content-Length ({length} bytes)")
            chunks.append(chunk)

    remaining = deadline - asyncio.get_running_loop().time()
    try:
        async with asyncio.timeout(max(0.0, remaining)):
            await collect()
    except TimeoutError:
        raise RequestError(408, f"the request did not arrive within {read_timeout_s:g} s") from None
    except ClientDisconnect:
        raise RequestError(400, "the body ended before Content-Length bytes") from None
    if got != length:
        raise RequestError(400, "the body ended before Content-Length bytes")
    return b"".join(chunks)
