"""Pacing sends to a chat platform: at most one message per chat per interval, and at most
so many per second overall — Telegram's documented limits (about 1 message/s in one chat,
about 30/s across chats) — so a busy bot waits *before* it is refused instead of only
reacting to 429s.

Plain state and arithmetic (no clock, no waiting): the caller reads its clock, asks
:meth:`SendPacer.reserve` how long to wait, and waits that long with its own sleep.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["SendPacer", "SendPacing"]


@dataclass(frozen=True)
class SendPacing:
    """How fast a transport may send (the defaults are Telegram's limits)."""

    #: seconds between two messages to the same chat
    per_chat_interval_s: float = 1.0
    #: messages in any ``window_s`` across all chats
    max_per_window: int = 30
    #: the window ``max_per_window`` counts in
    window_s: float = 1.0
    #: chats whose last send is remembered (the least recent are forgotten first: a chat not
    #: written to for that long is not waiting for its interval anyway)
    chats_remembered: int = 10_000

    def __post_init__(self) -> None:
        if self.per_chat_interval_s < 0 or self.window_s < 0:
            raise ValueError("pacing intervals must not be negative")
        if self.max_per_window < 1:
            raise ValueError("max_per_window must be at least 1")
        if self.chats_remembered < 1:
            raise ValueError("chats_remembered must be at least 1")


class SendPacer:
    """The send times reserved so far; not thread-safe (one event loop or one outbox thread).

    Reservations are handed out in order: a send never goes before one reserved earlier,
    which is how a sequential sender (the bridge's outbox) behaves anyway.
    """

    def __init__(self, pacing: SendPacing) -> None:
        self.pacing = pacing
        self._last_by_chat: OrderedDict[Hashable, float] = OrderedDict()
        #: the last ``max_per_window`` reserved times, oldest first
        self._recent: deque[float] = deque(maxlen=pacing.max_per_window)

    def reserve(self, chat: Hashable, now: float) -> float:
        """Reserve the earliest send to ``chat`` allowed at or after ``now`` (a monotonic
        time in seconds); returns how long to wait for it (0 when it may go at once)."""
        p = self.pacing
        at = now
        if self._recent:
            at = max(at, self._recent[-1])
            if len(self._recent) == p.max_per_window:
                at = max(at, self._recent[0] + p.window_s)
        last = self._last_by_chat.pop(chat, None)
        if last is not None:
            at = max(at, last + p.per_chat_interval_s)
        self._last_by_chat[chat] = at
        while len(self._last_by_chat) > p.chats_remembered:
            self._last_by_chat.popitem(last=False)
        self._recent.append(at)
        return at - now
