"""Streamed text from the I/O loop to the EventBus without a thread hop per token.

A model streaming at its own pace (a token a millisecond, one network write each) gave
the bus a message per token when the bus kept up: every token woke the bus thread (a
context switch, a GIL hand-off), which cost more than reading the token (issue 37:
~4 context switches per token). The :class:`DeltaPump` is the I/O loop's side of the
coalescing: a session's :class:`~corvid_actors.actors.session_wiring.Lifeline`, called
on the loop thread with a token for which it has no open buffer, starts a
:class:`~corvid_actors.actors.events.DeltaBuffer` and *offers* it here instead of
telling the bus. The pump tells the bus every buffer offered since its last tell in one
:class:`~corvid_actors.actors.events.PublishDeltaBatch`, at once when its last tell is at
least ``interval_s`` old (the first token of a reply is not delayed), else when it is;
meanwhile the sessions' later tokens go on merging into their buffers (and into the told
ones, until the bus takes them, as before). So the bus wakes at most once per interval
for every stream of the loop together, and a subscriber sees a session's text at most
``interval_s`` late.

Order: a buffer reaches the bus before any later event of its session. The lifeline tells
a buffer the pump has not told yet itself (``PublishDeltas``) before it tells another
event, and the pump marks a buffer told only *after* its batch is in the bus's inbox;
when both tell one buffer, the bus delivers it once (the first message takes it, the
second finds it taken and skips it).

Loop thread only (:meth:`offer`, the flush); the lifeline checks :meth:`here`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pykka

from corvid_actors.actors.base import tell
from corvid_actors.actors.events import DeltaBuffer, PublishDeltaBatch
from corvid_actors.core.io_loop import IoLoop


class DeltaPump:
    """Streamed text of every session on one I/O loop, told to the bus at most once per
    ``interval_s`` (see the module docstring)."""

    def __init__(self, bus: pykka.ActorRef[Any], io_loop: IoLoop[Any], interval_s: float) -> None:
        self._bus = bus
        self._io_loop = io_loop
        self._interval_s = interval_s
        self._pending: list[tuple[str, DeltaBuffer]] = []
        self._scheduled = False
        self._last = -float("inf")
        #: batches told to the bus, and buffers in them (stats, tests)
        self.batches = 0
        self.buffers = 0

    def here(self) -> bool:
        """True on the pump's I/O loop thread (the only thread that may :meth:`offer`)."""
        return IoLoop.current() is self._io_loop

    def offer(self, session_id: str, buffer: DeltaBuffer) -> None:
        """Tell ``buffer`` (a session's new, untold buffer) to the bus with the next batch."""
        self._pending.append((session_id, buffer))
        if self._scheduled:
            return
        self._scheduled = True
        loop = asyncio.get_running_loop()
        wait = self._last + self._interval_s - loop.time()
        if wait > 0:
            loop.call_later(wait, self._flush, loop)
        else:  # the last tell is old: this reply's first token goes out at once
            loop.call_soon(self._flush, loop)

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = False
        self._last = loop.time()
        pending, self._pending = self._pending, []
        # a buffer its lifeline told already (another event of its session came) is left out
        batch = tuple(entry for entry in pending if not entry[1].told)
        if not batch:
            return
        tell(self._bus, PublishDeltaBatch(batch))
        # told only now: a lifeline that still sees it untold tells it too (delivered once)
        for _sid, buffer in batch:
            buffer.told = True
        self.batches += 1
        self.buffers += len(batch)
