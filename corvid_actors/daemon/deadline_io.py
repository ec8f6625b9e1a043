"""Socket reads against a deadline, for the servers that face clients (the admin socket,
the chat webhook).

A plain socket timeout restarts with every ``recv``: a client that drips one byte just
inside it keeps a connection (and its thread) for ever. :class:`DeadlineSocketIO` gives
each ``recv`` only what is left of a *total* deadline, on a monotonic clock, and raises
``TimeoutError`` once it has passed. Wrap it in ``io.BufferedReader`` for ``readline``.
"""

from __future__ import annotations

import io
import socket
from typing import TYPE_CHECKING

from corvid_actors.clock import Clock

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer


class DeadlineSocketIO(io.RawIOBase):
    """The reading side of ``sock``; set :attr:`deadline` (``clock.monotonic()`` time, or
    None to wait as long as it takes) before each read."""

    def __init__(self, sock: socket.socket, clock: Clock) -> None:
        super().__init__()
        self.sock = sock
        self.clock = clock
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self.deadline is None:
            self.sock.settimeout(None)
        else:
            remaining = self.deadline - self.clock.monotonic()
            if remaining <= 0:
                raise TimeoutError("the deadline passed")
            self.sock.settimeout(remaining)
        return self.sock.recv_into(buffer)


__all__ = ["DeadlineSocketIO"]
