"""Server-sent events: the daemon's events to browsers and scripts (``GET /api/v1/events``,
``GET /api/v1/sessions/{id}/events``).

One :class:`EventHub` per listener follows every session's events (the admin actor's
``follow``, as ``corvid-actors events`` does; in cluster mode that includes the other
daemons' events). Each event gets an id, ``<boot>-<n>`` with ``n`` counting up from 1
in this listener's life, and goes into a ring of the last ``sse_backlog_events`` events
and to every stream that wants it.

A stream sends the backlog first — the ring's events after the ``Last-Event-ID`` header
(or the ``last_event_id`` query parameter), all of them without one, the last
``backlog`` with that parameter — then the live events, one ``id:``/``data:`` block each,
and a ``: keep-alive`` comment after ``sse_heartbeat_s`` without one. ``data`` is the
envelope the admin socket's followers get: ``{"session_id", "at", "event": {...}}``.

Bounds: a stream's queue holds at most ``sse_client_queue_events`` undelivered events. A
client further behind gets ``event: overflow`` and the stream closes; the browser's
``EventSource`` reconnects with the last id it saw and gets the rest from the ring. A
``Last-Event-ID`` older than the ring (or of an earlier boot) is answered
``event: gap`` first (``{"missed_after": id}``), then the whole ring: the client knows
it lost events and can reload the history. The hub lives on the listener's event loop;
events arrive on the EventBus thread and cross by ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

#: what ends a stream's queue (the hub closed)
_CLOSED = object()
#: most events sent in one write
_BATCH = 256


@dataclass(frozen=True)
class Item:
    """One event of the hub: its sequence number, session and the SSE block ready to send."""

    seq: int
    session_id: str
    block: bytes


@dataclass(eq=False)
class Stream:
    """One client's subscription (on the hub's loop)."""

    session_id: str | None
    limit: int
    queue: deque[Any] = field(default_factory=deque)
    overflowed: bool = False
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, item: Any) -> None:
        if self.overflowed:
            return
        if item is not _CLOSED and len(self.queue) >= self.limit:
            self.overflowed = True  # the stream ends; the client resumes from the ring
        else:
            self.queue.append(item)
        self.wakeup.set()


class EventHub:
    """See the module docstring. :meth:`publish` may be called from any thread once
    :meth:`bind` gave the hub its loop; every other method runs on that loop."""

    def __init__(self, backlog: int, queue_limit: int) -> None:
        self.boot = secrets.token_hex(4)
        self._ring: deque[Item] = deque(maxlen=backlog)
        self._seq = 0
        self._limit = queue_limit
        self._streams: set[Stream] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        #: streams closed for falling behind (the metrics and the stats read it)
        self.overflows = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def publish(self, session_id: str, at: str, event: dict[str, Any]) -> None:
        """An event of ``session_id`` (any thread: the EventBus calls it)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._publish, session_id, at, event)
            except RuntimeError:  # the loop closed in between: the listener is gone
                pass

    def _publish(self, session_id: str, at: str, event: dict[str, Any]) -> None:
        if self._closed:
            return
        self._seq += 1
        data = json.dumps({"session_id": session_id, "at": at, "event": event}, default=str,
                          separators=(",", ":"))
        item = Item(self._seq, session_id, f"id: {self.boot}-{self._seq}\ndata: {data}\n\n".encode())
        self._ring.append(item)
        for stream in self._streams:
            if stream.session_id is None or stream.session_id == session_id:
                stream.offer(item)

    def close(self) -> None:
        """End every stream (the listener stops)."""
        self._closed = True
        for stream in list(self._streams):
            stream.offer(_CLOSED)

    @property
    def streams(self) -> int:
        return len(self._streams)

    def open(self, session_id: str | None, last_event_id: str | None,
             backlog: int | None) -> tuple[Stream, list[bytes]]:
        """Subscribe a new stream; returns it and the blocks of its backlog (a gap notice first
        when ``last_event_id`` is older than the ring)."""
        stream = Stream(session_id, self._limit)
        if self._closed:
            stream.offer(_CLOSED)
        self._streams.add(stream)
        wanted = [i for i in self._ring if session_id is None or i.session_id == session_id]
        head: list[bytes] = []
        after = self._after(last_event_id)
        if after is not None:
            oldest = self._ring[0].seq if self._ring else self._seq + 1
            if after + 1 < oldest or after > self._seq:
                head.append(f"event: gap\ndata: {json.dumps({'missed_after': last_event_id})}\n\n".encode())
            else:
                wanted = [i for i in wanted if i.seq > after]
        elif last_event_id:
            head.append(f"event: gap\ndata: {json.dumps({'missed_after': last_event_id})}\n\n".encode())
        if backlog is not None:
            wanted = wanted[-backlog:] if backlog else []
        return stream, head + [i.block for i in wanted]

    def _after(self, last_event_id: str | None) -> int | None:
        """The sequence number ``last_event_id`` names in this boot, else None."""
        if not last_event_id:
            return None
        boot, sep, seq = last_event_id.strip().partition("-")
        if not sep or boot != self.boot or not seq.isdigit():
            return None
        return int(seq)

    def close_stream(self, stream: Stream) -> None:
        self._streams.discard(stream)

    async def blocks(self, stream: Stream, backlog: list[bytes], heartbeat_s: float) -> AsyncIterator[bytes]:
        """The stream's bytes: the backlog, then live events and heartbeats, until the hub
        closes (``event: end``) or the client falls behind (``event: overflow``)."""
        try:
            yield b": corvid-actors events\n\n"  # headers and a first byte out at once
            for block in backlog:
                yield block
            while True:
                if not stream.queue:
                    if stream.overflowed:
                        self.overflows += 1
                        yield b"event: overflow\ndata: {}\n\n"
                        return
                    stream.wakeup.clear()
                    try:
                        await asyncio.wait_for(stream.wakeup.wait(), heartbeat_s)
                    except TimeoutError:
                        yield b": keep-alive\n\n"
                    continue
                # what is queued goes out in one write (a busy stream costs one send per wakeup,
                # not one per event)
                out: list[bytes] = []
                closed = False
                while stream.queue and len(out) < _BATCH:
                    item = stream.queue.popleft()
                    if item is _CLOSED:
                        closed = True
                        break
                    out.append(item.block)
                if out:
                    yield b"".join(out)
                if closed:
                    yield b"event: end\ndata: {}\n\n"
                    return
        finally:
            self.close_stream(stream)
