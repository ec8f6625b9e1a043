"""A small thread-safe LRU map: what an incarnation builds from its agent, kept per process.

Issue 37 item 1: a session's agent rows (the store's ``session_context``) and what the
builder makes of them (``wiring.BuildCache``) are the same for every incarnation while the
agent's ``revision`` is; keys carry the revision, so an entry is never stale, only unused.
Bounded by ``[session] build_cache_entries``: the least recently used entry goes first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class LruCache(Generic[V]):
    """At most ``entries`` values by key (0: keeps nothing); safe from any thread."""

    def __init__(self, entries: int) -> None:
        self.entries = max(0, int(entries))
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        #: lookups that found an entry and that did not (for tests and benchmarks)
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> V | None:
        """The value under ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: V) -> None:
        """Keep ``value`` under ``key``; the least recently used entry goes beyond the bound."""
        if self.entries == 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.entries:
                self._items.popitem(last=False)

    def drop(self, match: Callable[[Hashable], bool]) -> int:
        """Remove every entry whose key ``match`` accepts; how many went."""
        with self._lock:
            gone = [key for key in self._items if match(key)]
            for key in gone:
                del self._items[key]
            return len(gone)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
