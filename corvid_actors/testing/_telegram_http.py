"""The HTTP side of the Telegram stub: the request handler for the Bot API's
``/bot<token>/<method>`` URLs (GET or POST, JSON or form bodies), which hands each call
to the stub and writes back its JSON answer.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from corvid_actors.core.jsontypes import WireJson
from corvid_actors.testing._telegram_wire import api_error, request_params

#: answers one Bot API call: ``(method, params)`` → ``(status, JSON body)``
ApiCall = Callable[[str, dict[str, WireJson]], tuple[int, dict[str, WireJson]]]


def handler_class(token: str, call: ApiCall) -> type[BaseHTTPRequestHandler]:
    """A handler class serving the Bot API of the bot ``token`` through ``call``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self._serve()

        def do_GET(self) -> None:  # noqa: N802
            self._serve()

        def _serve(self) -> None:
            path = urllib.parse.urlsplit(self.path)
            prefix = f"/bot{token}/"
            if not path.path.startswith(prefix):
                self._reply(401, api_error(401, "Unauthorized"))
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            params = request_params(body, self.headers.get("Content-Type", ""), path.query)
            status, payload = call(path.path[len(prefix):], params)
            self._reply(status, payload)

        def _reply(self, status: int, payload: dict[str, WireJson]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a cancelled long poll): nothing to tell it

        def log_message(self, *args: object) -> None:
            pass

    return Handler
