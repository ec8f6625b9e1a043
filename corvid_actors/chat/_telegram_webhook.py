"""The webhook receiver of the Telegram transport: a minimal HTTP/1.1 server for one
``POST`` path that checks Telegram's secret header and answers 200 only after the update
was handled (Telegram redelivers otherwise).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

#: the header Telegram sends a webhook's ``secret_token`` in
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_MAX_REQUEST_BYTES = 1 << 20
_MAX_HEADERS = 100


async def serve_webhook(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    path: str,
    secret_token: str,
    read_timeout_s: float,
    handle: Callable[[bytes, str | None], Awaitable[bool]],
) -> None:
    """Answer one connection: read the request (within ``read_timeout_s``), pass a body
    posted to ``path`` with the right secret to ``handle``, and answer with its outcome
    (200 handled, 503 not handled) or the request's fault (400/403/404/408/413)."""
    status = 400
    try:
        async with asyncio.timeout(read_timeout_s):  # a client that stalls is cut off
            request_line = (await reader.readline()).decode("latin-1").split()
            headers: dict[str, str] = {}
            while (line := (await reader.readline()).decode("latin-1").strip()):
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
                if len(headers) > _MAX_HEADERS:
                    raise ValueError("too many headers")
            length = int(headers.get("content-length", "0"))
            body = b""
            if len(request_line) < 2 or request_line[0] != "POST" or request_line[1] != path:
                status = 404
            elif not 0 < length <= _MAX_REQUEST_BYTES:
                status = 413 if length else 400
            else:
                body = await reader.readexactly(length)
        secret = headers.get(SECRET_HEADER.lower())
        if body and secret_token and secret != secret_token:
            status = 403
        elif body:
            # not under the read timeout: handling waits for the bridge, not for the client
            status = 200 if await handle(body, secret) else 503
    except TimeoutError:
        status = 408
    except (ValueError, asyncio.IncompleteReadError, ConnectionError):
        status = 400
    reason = {200: "OK", 403: "Forbidden", 404: "Not Found", 408: "Request Timeout",
              413: "Payload Too Large", 503: "Service Unavailable"}.get(status, "Bad Request")
    try:
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()
