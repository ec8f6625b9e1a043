"""A loopback Ollama server for tests: the real ``ollama`` client talks to it over a socket.

Stdlib only. It speaks ``/api/chat`` (NDJSON streaming, or one JSON object with
``"stream": false``; ``stream`` absent means streaming), ``/api/tags``, ``/api/show``,
``/api/ps`` and ``/api/version``; serves scripted :class:`Turn` values in FIFO order
(optionally only to requests whose last user message contains ``match``); injects
faults; and records every request (or, with ``keep_requests``, the most recent ones).

    with OllamaStubServer() as stub:
        stub.add_reply("Hello there", chunks=3)
        stub.add_tool_calls([("read_file", {"path": "a.py"})])
        stub.add_fault("drop_mid_stream", after_chunks=2)
        provider = OllamaProvider(stub.url)
        ...
        assert stub.wait_for(lambda: stub.disconnects == 1, timeout_s=1.0)

Text-format tool calls and fake ``«tool_output»`` markers are simply reply texts.
``llava:7b`` has the ``vision`` capability (a message's ``images`` are recorded with the
request); ``tags_status`` makes ``/api/tags`` (the health probe) answer another status.
Waits keep real time even while freezegun has frozen it (see ``_ollama_http``).
Handler threads call into the stub; all its state sits behind one condition variable.
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from corvid_actors.core.jsontypes import JsonObject, WireJson
from corvid_actors.testing._ollama_http import ClientGone, RealTime, StubHandler, StubHTTPServer
from corvid_actors.testing._ollama_stream import stream_turn
from corvid_actors.testing._ollama_wire import (
    DEFAULT_MODELS,
    FAULT_KINDS,
    SERVER_VERSION,
    SLOW_CHUNK_DELAY_S,
    StubModel,
    Turn,
    last_user_text,
    no_tools_text,
    ps_body,
    show_body,
    split_chunks,
    tags_body,
    whole_answer,
)

#: How often the accept loop checks for stop(); bounds how long stop() takes.
_SERVE_POLL_S = 0.02


@dataclass(frozen=True)
class RecordedRequest:
    """A request the stub received (``headers`` with lower-case names)."""

    method: str
    path: str
    json: WireJson
    headers: dict[str, str]


class OllamaStubServer:
    """A scripted Ollama server on 127.0.0.1 (a context manager; see the module docstring).

    ``models`` maps model names to :class:`StubModel`. With ``strict_models`` a chat
    for an unknown model gets Ollama's 404; otherwise it is served like any other
    (``/api/show`` always 404s for unknown models). A chat that offers tools to a model
    with ``supports_tools=False`` gets the real 400 "does not support tools".
    Unscripted chats are answered by ``responder`` (if it returns a Turn) or with
    ``default_reply``.

    ``keep_requests``: how many of the most recent requests :attr:`requests` keeps —
    ``None`` (the default, for tests) keeps every one; a long-running host (the daemon's
    built-in stub) passes a bound, or its memory grows with every request served.
    """

    def __init__(
        self,
        models: Mapping[str, StubModel] | None = None,
        *,
        default_reply: str = "ok",
        responder: Callable[[JsonObject], Turn | None] | None = None,
        strict_models: bool = False,
        keep_requests: int | None = None,
    ) -> None:
        if keep_requests is not None and keep_requests < 0:
            raise ValueError(f"keep_requests must be None or >= 0, not {keep_requests}")
        self.models: dict[str, StubModel] = dict(DEFAULT_MODELS if models is None else models)
        self.default_reply = default_reply
        self.responder = responder
        self.strict_models = strict_models
        #: HTTP status ``GET /api/tags`` answers with (anything but 200 sends an error body):
        #: health probes against a server that is up but refuses, or one that fails
        self.tags_status = 200
        self._cond = threading.Condition()
        self._turns: list[Turn] = []
        self._requests: deque[RecordedRequest] = deque(maxlen=keep_requests)
        self._connections: set[socket.socket] = set()
        self._loaded: list[str] = []
        self._counts = {"disconnects": 0, "active": 0, "completed": 0}
        self._stopping = False
        self._server: StubHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> OllamaStubServer:
        """Bind a free port on 127.0.0.1 and serve on a background thread."""
        if self._server is None:
            self._stopping = False
            self._server = StubHTTPServer(self)
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                args=(_SERVE_POLL_S,),
                name="ollama-stub",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and cut every open connection (streams in progress end at once)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        with self._cond:
            self._stopping = True
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> OllamaStubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (start the server first)."""
        if self._server is None:
            raise RuntimeError("OllamaStubServer is not running: call start() first")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- scripting -------------------------------------------------------------------

    def add_turn(self, turn: Turn) -> Turn:
        """Queue a turn.

        A chat request gets the oldest turn whose ``match`` its last user message
        contains; failing that, the oldest turn without ``match``; failing that, the
        ``responder``'s turn or ``default_reply``.
        """
        if turn.fault is not None and turn.fault not in FAULT_KINDS:
            raise ValueError(f"unknown fault {turn.fault!r}; expected one of {sorted(FAULT_KINDS)}")
        with self._cond:
            self._turns.append(turn)
        return turn

    def add_reply(
        self,
        text: str,
        *,
        chunks: int | None = None,
        delay_s: float = 0.0,
        match: str | None = None,
    ) -> Turn:
        """Queue a streamed text reply."""
        return self.add_turn(Turn(text=text, chunks=chunks, delay_s=delay_s, match=match))

    def add_tool_calls(
        self, calls: list[tuple[str, JsonObject]], text: str = "", match: str | None = None
    ) -> Turn:
        """Queue a reply with native ``tool_calls`` (after ``text``, if any)."""
        return self.add_turn(Turn(text=text, tool_calls=list(calls), match=match))

    def add_fault(
        self,
        kind: str,
        *,
        match: str | None = None,
        after_chunks: int = 0,
        text: str | None = None,
        delay_s: float = 0.0,
        chunks: int | None = None,
        status: int | None = None,
        error: str | None = None,
        reset: bool = False,
    ) -> Turn:
        """Queue a fault; see :class:`Turn`. ``slow`` is a reply with ``delay_s`` per chunk."""
        if kind == "slow" and delay_s <= 0:
            delay_s = SLOW_CHUNK_DELAY_S
        if text is None:
            text = " ".join(f"token{i}" for i in range(max(after_chunks, 1) * 2))
        return self.add_turn(
            Turn(
                text=text,
                chunks=chunks,
                delay_s=delay_s,
                match=match,
                fault=kind,
                after_chunks=after_chunks,
                status=status,
                error=error,
                reset=reset,
            )
        )

    @property
    def pending_turns(self) -> int:
        """Scripted turns not yet served."""
        with self._cond:
            return len(self._turns)

    # -- observation -----------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far (the last ``keep_requests`` if bounded), oldest first (a copy)."""
        with self._cond:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The ``/api/chat`` requests received so far."""
        return [r for r in self.requests if r.path == "/api/chat"]

    @property
    def disconnects(self) -> int:
        """Streams the client closed before their end."""
        with self._cond:
            return self._counts["disconnects"]

    @property
    def active_streams(self) -> int:
        """Streams being written right now."""
        with self._cond:
            return self._counts["active"]

    @property
    def completed_streams(self) -> int:
        """Streams that ended normally."""
        with self._cond:
            return self._counts["completed"]

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 1.0) -> bool:
        """Wait (real time, at most ``timeout_s``) until ``predicate()``; returns its last value.

        Re-checked whenever a request arrives or a stream starts, ends or is cut.
        """
        deadline = RealTime.monotonic() + timeout_s
        with self._cond:
            while not predicate():
                remaining = deadline - RealTime.monotonic()
                if remaining <= 0:
                    return bool(predicate())
                self._cond.wait(remaining)
            return True

    # -- handler threads -------------------------------------------------------------

    def track(self, conn: socket.socket, *, add: bool) -> None:
        """Called by the handler: a connection opened or closed (stop() cuts the open ones)."""
        with self._cond:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _count(self, name: str, delta: int = 1) -> None:
        with self._cond:
            self._counts[name] += delta
            self._cond.notify_all()

    def dispatch(self, handler: StubHandler, method: str, body: WireJson) -> None:
        """Called by the handler with each request (body already read and decoded)."""
        path = handler.path.split("?", 1)[0]
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._cond:
            self._requests.append(RecordedRequest(method, path, body, headers))
            self._cond.notify_all()
        body = body if isinstance(body, dict) else {}
        if path == "/" and method in ("GET", "HEAD"):
            handler.send_bytes(200, b"Ollama is running", "text/plain", head=method == "HEAD")
        elif (method, path) == ("GET", "/api/version"):
            handler.send_json(200, {"version": SERVER_VERSION})
        elif (method, path) == ("GET", "/api/tags"):
            if self.tags_status != 200:
                handler.send_json(self.tags_status, {"error": f"status {self.tags_status}"})
            else:
                handler.send_json(200, tags_body(self.models))
        elif (method, path) == ("GET", "/api/ps"):
            with self._cond:
                loaded = list(self._loaded)
            handler.send_json(200, ps_body(self.models, loaded))
        elif (method, path) == ("POST", "/api/show"):
            self._show(handler, body)
        elif (method, path) == ("POST", "/api/chat"):
            self._chat(handler, body)
        else:
            handler.send_json(404, {"error": f"{method} {path} not found"})

    def _show(self, handler: StubHandler, body: JsonObject) -> None:
        name = str(body.get("model") or body.get("name") or "")
        spec = self.models.get(name)
        if spec is None:
            handler.send_json(404, {"error": f"model '{name}' not found"})
        else:
            handler.send_json(200, show_body(name, spec))

    def _next_turn(self, body: JsonObject) -> Turn:
        last_user = last_user_text(body)
        with self._cond:
            # a turn scripted for this conversation beats one scripted for anyone
            for wanted in (
                lambda t: t.match is not None and t.match in last_user,
                lambda t: t.match is None,
            ):
                for i, turn in enumerate(self._turns):
                    if wanted(turn):
                        return self._turns.pop(i)
        dynamic = self.responder(body) if self.responder is not None else None
        return dynamic if dynamic is not None else Turn(text=self.default_reply)

    def _chat(self, handler: StubHandler, body: JsonObject) -> None:
        model = str(body.get("model") or "")
        spec = self.models.get(model)
        if spec is None and self.strict_models:
            handler.send_json(404, {"error": f'model "{model}" not found, try pulling it first'})
            return
        if spec is not None and body.get("tools") and not spec.supports_tools:
            handler.send_json(400, {"error": no_tools_text(model)})
            return
        turn = self._next_turn(body)
        streaming = body.get("stream") is not False
        if turn.http_fault and (turn.after_chunks <= 0 or not streaming):
            handler.send_json(turn.error_status(), {"error": turn.error_text(model)})
            return
        with self._cond:
            if model not in self._loaded:
                self._loaded.append(model)
        if not streaming:
            if turn.fault == "drop_mid_stream":
                handler.drop(reset=turn.reset)
                return
            handler.wait(turn.delay_s)
            handler.send_json(200, whole_answer(model, turn, body))
            return
        handler.start_stream()
        self._count("active")
        try:
            if stream_turn(handler, model, turn, body):
                self._count("completed")
        except ClientGone:
            handler.close_connection = True
            if not self._stopping:  # stop() cutting the stream is not the client's doing
                self._count("disconnects")
        finally:
            self._count("active", -1)


__all__ = [
    "DEFAULT_MODELS",
    "FAULT_KINDS",
    "SLOW_CHUNK_DELAY_S",
    "OllamaStubServer",
    "RecordedRequest",
    "StubModel",
    "Turn",
    "split_chunks",
]
