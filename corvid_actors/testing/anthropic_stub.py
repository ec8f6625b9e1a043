"""A loopback stub of the Anthropic Messages API, for tests of the real ``anthropic`` SDK.

:class:`AnthropicStubServer` speaks enough of the wire protocol that the official client
runs end to end without a network: ``POST /v1/messages`` streamed (the full SSE sequence,
``ping`` included) and non-streamed, ``POST /v1/messages/count_tokens`` and
``GET /v1/models/{id}``. Tests script what each ``/v1/messages`` request gets, in order:
text replies, tool calls (arguments split across ``input_json_delta`` events), malformed
tool arguments, HTTP errors with ``retry-after``, in-stream ``error`` events, dropped
connections and slow streams. Every request is recorded (or, with ``keep_requests``, the
most recent ones), and so is every client that went away mid-stream (``disconnects``), which is how a test proves a stop closed the
stream.

It is stdlib only, binds 127.0.0.1 on a free port and serves from its own threads::

    with AnthropicStubServer() as stub:
        stub.add_reply("Hello!", chunks=3)
        client = anthropic.Anthropic(api_key="k", base_url=stub.url, max_retries=0)

Waits inside the stub use real time even while freezegun freezes the clock (the time
functions are kept as class attributes, which freezegun does not rewrite), so a
simulation test with frozen time can still talk to it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from corvid_actors.core.jsontypes import WireJson
from corvid_actors.testing._anthropic_http import (
    Disconnect,
    RecordedRequest,
    StubHandler,
    StubHTTPServer,
    shutdown_quietly,
)
from corvid_actors.testing._anthropic_wire import (
    FAULT_KINDS,
    Fault,
    TextContent,
    ToolUseContent,
    Turn,
    last_user_text,
    split_evenly,
    split_words,
)

__all__ = [
    "AnthropicStubServer",
    "Disconnect",
    "Fault",
    "RecordedRequest",
    "TextContent",
    "ToolUseContent",
    "Turn",
]

#: the models ``GET /v1/models/{id}`` knows unless the test passes its own table
DEFAULT_STUB_MODELS: Mapping[str, int] = {
    "claude-opus-5-5": 200_000,
    "claude-sonnet-5-5": 200_000,
    "claude-haiku-5-5": 200_000,
}
#: per-event delay of the "slow" fault unless the test gives one
DEFAULT_SLOW_DELAY_S = 0.05
#: how often the accept loop checks for close() (it bounds how long close() takes)
SERVE_POLL_INTERVAL_S = 0.01
#: how long close() waits for each handler thread to finish
HANDLER_JOIN_TIMEOUT_S = 2.0


@dataclass
class _State:
    turns: list[Turn] = field(default_factory=list)
    requests: deque[RecordedRequest] = field(default_factory=deque)
    disconnects: deque[Disconnect] = field(default_factory=deque)
    outage_status: int | None = None
    request_ids: int = 0
    tool_ids: int = 0
    completed_streams: int = 0


class AnthropicStubServer:
    """A scripted Anthropic API on 127.0.0.1 (see the module docstring).

    ``api_key``: when given, only that key is accepted; otherwise any non-empty
    ``x-api-key`` or ``Authorization: Bearer`` is. ``default_reply`` answers a request
    no scripted turn matches. ``models`` maps model ids to ``max_input_tokens``.
    ``keep_requests``: how many of the most recent requests (and disconnects) are kept —
    ``None`` (the default, for tests) keeps every one; a long-running host passes a
    bound, or its memory grows with every request served. All methods are thread-safe.
    """

    # Kept as class attributes so freezegun's module rewrite does not reach them.
    _monotonic = staticmethod(time.monotonic)

    def __init__(
        self,
        *,
        api_key: str | None = None,
        default_reply: str = "OK",
        models: Mapping[str, int] | None = None,
        keep_requests: int | None = None,
    ) -> None:
        if keep_requests is not None and keep_requests < 0:
            raise ValueError(f"keep_requests must be None or >= 0, not {keep_requests}")
        self.api_key = api_key
        self.default_reply = default_reply
        self.models = dict(DEFAULT_STUB_MODELS if models is None else models)
        self._cond = threading.Condition()
        self._state = _State(requests=deque(maxlen=keep_requests), disconnects=deque(maxlen=keep_requests))
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._httpd: StubHTTPServer | None = None
        self._serve_thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> AnthropicStubServer:
        """Bind 127.0.0.1 on a free port and serve on a background thread."""
        self._httpd = StubHTTPServer(("127.0.0.1", 0), StubHandler, self)
        self._serve_thread = threading.Thread(
            target=self._httpd.serve_forever, args=(SERVE_POLL_INTERVAL_S,), name="anthropic-stub",
            daemon=True,
        )
        self._serve_thread.start()
        return self

    def close(self) -> None:
        """Stop serving; cut open connections so streaming handlers end at once."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        with self._cond:
            sockets, threads = list(self._sockets), list(self._threads)
        for sock in sockets:
            shutdown_quietly(sock)
        self._httpd.server_close()
        for thread in [*threads, self._serve_thread]:
            if thread is not None:
                thread.join(HANDLER_JOIN_TIMEOUT_S)
        self._httpd = self._serve_thread = None

    def __enter__(self) -> AnthropicStubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """Base URL for ``anthropic.Anthropic(base_url=...)``."""
        assert self._httpd is not None, "start() the stub first"
        host, port = self._httpd.server_address[:2]
        if isinstance(host, bytes):  # typeshed allows it; an AF_INET server has a str
            host = host.decode()
        return f"http://{host}:{port}"

    # --- scripting ---------------------------------------------------------------------

    def add_turn(self, turn: Turn) -> Turn:
        """Queue ``turn`` for a later ``/v1/messages`` request (FIFO among matches)."""
        with self._cond:
            self._state.turns.append(turn)
        return turn

    def add_reply(
        self,
        text: str,
        *,
        chunks: int | None = None,
        delay_s: float = 0.0,
        stop_reason: str = "end_turn",
        usage: Mapping[str, int] | None = None,
        match: str | None = None,
    ) -> Turn:
        """A text reply, streamed word by word or in ``chunks`` equal pieces.

        ``delay_s`` waits before every SSE event (a slow stream); ``usage`` overrides the
        token counts (``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
        ``cache_creation_input_tokens``).
        """
        pieces = split_words(text) if chunks is None else split_evenly(text, chunks)
        content = (TextContent(text, tuple(pieces)),)
        usage_map = dict(usage) if usage is not None else None
        return self.add_turn(Turn(content, stop_reason, usage_map, delay_s, None, match))

    def add_tool_use(
        self,
        calls: Sequence[tuple[str, Mapping[str, WireJson]]],
        *,
        text: str = "",
        split_into: int = 3,
        usage: Mapping[str, int] | None = None,
        match: str | None = None,
    ) -> Turn:
        """One assistant message calling every tool in ``calls`` (``stop_reason`` tool_use).

        Each call's JSON arguments are split across ``split_into`` ``input_json_delta``
        events. An optional ``text`` block comes first. Ids are ``toolu_stub_N``.
        """
        content: list[TextContent | ToolUseContent] = []
        if text:
            content.append(TextContent(text, tuple(split_words(text))))
        for name, arguments in calls:
            raw = json.dumps(dict(arguments))
            content.append(ToolUseContent(self._tool_id(), name, tuple(split_evenly(raw, split_into))))
        usage_map = dict(usage) if usage is not None else None
        return self.add_turn(Turn(tuple(content), "tool_use", usage_map, 0.0, None, match))

    def add_raw_tool_use(
        self,
        name: str,
        partial_json_chunks: Sequence[str],
        *,
        stop_reason: str = "tool_use",
        match: str | None = None,
    ) -> Turn:
        """A tool call whose ``input_json_delta`` chunks are sent verbatim (e.g. malformed)."""
        content = (ToolUseContent(self._tool_id(), name, tuple(partial_json_chunks)),)
        return self.add_turn(Turn(content, stop_reason, None, 0.0, None, match))

    def add_fault(
        self,
        kind: str,
        *,
        retry_after_s: float | None = None,
        retry_after_ms: float | None = None,
        error_type: str | None = None,
        after_events: int = 0,
        delay_s: float = DEFAULT_SLOW_DELAY_S,
        text: str | None = None,
        message: str | None = None,
        match: str | None = None,
    ) -> Turn:
        """Queue a failure for one request. ``kind`` is one of :data:`FAULT_KINDS`:

        ``http_429``/``http_500``/``http_529``/``http_401``/``http_400`` answer that status
        (with ``retry-after``/``retry-after-ms`` when given); ``context_overflow`` answers
        400 "prompt is too long"; ``stream_error`` sends an ``event: error`` after
        ``after_events`` SSE events; ``drop`` closes the socket mid-chunk after
        ``after_events`` events; ``stall`` sends ``after_events`` events and then nothing
        until the client gives up; ``slow`` streams ``text`` (default reply) word by word
        with ``delay_s`` before each event. ``error_type`` overrides the error body's type
        (``stream_error`` defaults to ``overloaded_error``) and ``message`` its message.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {sorted(FAULT_KINDS)}")
        if kind == "slow":
            return self.add_reply(text or self.default_reply, delay_s=delay_s, match=match)
        fault = Fault(kind, retry_after_s, retry_after_ms, error_type, after_events, message)
        reply = text or self.default_reply
        content = (TextContent(reply, tuple(split_words(reply))),)
        return self.add_turn(Turn(content, "end_turn", None, 0.0, fault, match))

    def set_outage(self, status: int | None) -> None:
        """While set, every request (health probes and model lookups too) answers ``status``."""
        with self._cond:
            self._state.outage_status = status

    # --- observation -------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far (the last ``keep_requests`` if bounded), oldest first."""
        with self._cond:
            return list(self._state.requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """The ``POST /v1/messages`` requests only."""
        return [r for r in self.requests if r.method == "POST" and r.path == "/v1/messages"]

    @property
    def disconnects(self) -> list[Disconnect]:
        """Streams the client abandoned before the stub finished them."""
        with self._cond:
            return list(self._state.disconnects)

    @property
    def completed_streams(self) -> int:
        """Streams without a fault the stub wrote to their end (the count lags the client's last read: the
        handler thread writes the end after the client may already have its last event —
        wait with :meth:`wait_for`)."""
        with self._cond:
            return self._state.completed_streams

    @property
    def pending_turns(self) -> int:
        """Scripted turns not yet consumed."""
        with self._cond:
            return len(self._state.turns)

    def wait_for(self, predicate: Callable[[], object], timeout_s: float) -> bool:
        """Wait (real time) until ``predicate()`` is truthy; False on timeout.

        Re-evaluated whenever a request, a stream event or a disconnect is recorded.
        """
        deadline = self._monotonic() + timeout_s
        with self._cond:
            while not predicate():
                remaining = deadline - self._monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    # --- used by the handler -----------------------------------------------------------

    def _tool_id(self) -> str:
        with self._cond:
            self._state.tool_ids += 1
            return f"toolu_stub_{self._state.tool_ids:04d}"

    def _record(self, request: RecordedRequest) -> tuple[int, str]:
        with self._cond:
            self._state.requests.append(request)
            self._state.request_ids += 1
            self._cond.notify_all()
            # the index counts every request served, recorded or not (Disconnect.request_index)
            return self._state.request_ids - 1, f"req_stub_{self._state.request_ids:06d}"

    def _record_disconnect(self, disconnect: Disconnect) -> None:
        with self._cond:
            self._state.disconnects.append(disconnect)
            self._cond.notify_all()

    def _stream_completed(self) -> None:
        with self._cond:
            self._state.completed_streams += 1
            self._cond.notify_all()

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _outage(self) -> int | None:
        with self._cond:
            return self._state.outage_status

    def _take_turn(self, body: Mapping[str, WireJson]) -> Turn:
        text = last_user_text(body)
        with self._cond:
            for i, turn in enumerate(self._state.turns):
                if turn.match is None or turn.match in text:
                    return self._state.turns.pop(i)
        return Turn((TextContent(self.default_reply, tuple(split_words(self.default_reply))),))

    def _connection_opened(self, sock: socket.socket, thread: threading.Thread) -> None:
        with self._cond:
            self._sockets.add(sock)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _connection_closed(self, sock: socket.socket) -> None:
        with self._cond:
            self._sockets.discard(sock)
