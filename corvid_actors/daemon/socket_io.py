"""The admin socket's stream pieces: a follower's bounded queue and a line reader with a deadline.

:class:`FollowQueue` sits between the EventBus thread (``put`` never waits) and the
connection thread that writes the follower's lines; :class:`LineReader` reads request
lines from a connection against a total deadline. Used by
:mod:`corvid_actors.daemon.socket_server`.
"""

from __future__ import annotations

import io
import socket
import threading
from collections import deque
from typing import Any

from corvid_actors.clock import Clock
from corvid_actors.daemon.deadline_io import DeadlineSocketIO

#: the last item of a follower's queue: the stream ends after what was queued before it
HANGUP = object()


class FollowQueue:
    """One follower's events: bounded, and ``put`` never waits (it runs on the EventBus
    thread) — what does not fit is counted and reported with the next item instead."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: deque[Any] = deque()
        self._cond = threading.Condition()
        self._dropped = 0

    def put(self, item: Any) -> None:
        """Queue ``item``, or count it as dropped when the queue is full (never waits)."""
        with self._cond:
            if len(self._items) >= self.capacity:
                self._dropped += 1
                return
            self._items.append(item)
            self._cond.notify()

    def hang_up(self) -> None:
        """End the stream after what is queued (always fits)."""
        with self._cond:
            self._items.append(HANGUP)
            self._cond.notify()

    def get(self) -> tuple[Any, int]:
        """The next item (waiting for one), and how many were dropped before it."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._items))
            dropped, self._dropped = self._dropped, 0
            return self._items.popleft(), dropped


#: bytes read at a time while skipping the rest of an over-long line
DISCARD_CHUNK = 65536


class LineReader:
    """``\\n``-terminated lines from a socket against a total deadline (a slow drip does
    not extend it): :class:`~corvid_actors.daemon.deadline_io.DeadlineSocketIO`, buffered."""

    def __init__(self, sock: socket.socket, clock: Clock) -> None:
        self._raw = DeadlineSocketIO(sock, clock)
        self._buffered = io.BufferedReader(self._raw, DISCARD_CHUNK)

    def readline(self, limit: int, deadline: float | None) -> bytes:
        """The next line (with its ``\\n``); ``limit + 1`` bytes without one when it is
        longer; what is left at EOF (``b""`` when nothing). Raises TimeoutError."""
        self._raw.deadline = deadline
        return self._buffered.readline(limit + 1)

    def discard_line(self, deadline: float | None) -> bool:
        """Skip to the end of the current line; False when the peer hung up first."""
        self._raw.deadline = deadline
        while True:
            chunk = self._buffered.readline(DISCARD_CHUNK)
            if not chunk:
                return False
            if chunk.endswith(b"\n"):
                return True
