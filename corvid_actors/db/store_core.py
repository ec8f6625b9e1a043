"""What the store's write helpers need of the store: :class:`StoreCore`.

The helpers that commit rows on the store's behalf — the group commit's multi-row
``INSERT`` (:mod:`.message_batches`) and the send lane (:mod:`.send_lane`) — are
built by :class:`~corvid_actors.db.store_base.StoreBase` and type their store with
this protocol instead of importing it back (no import cycle: this module sits below
all three). ``StoreBase`` satisfies it structurally.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import SimpleNamespace
from typing import Any, Protocol

import peewee as pw


class StoreCore(Protocol):
    """The store's connection, lock, transactions and error mapping, as its write helpers
    use them (see the module docstring; each member is documented on ``StoreBase``)."""

    url: str
    db: pw.Database
    m: SimpleNamespace

    @property
    def is_sqlite(self) -> bool: ...

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def sql_cache(self) -> dict[Any, str]: ...

    def epoch_of(self, session_id: str) -> int | None: ...

    def check_writable(self, *, now: bool = False) -> None: ...

    def in_transaction(self) -> bool: ...

    def transaction(self) -> AbstractContextManager[None]: ...

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    def write_error(self, exc: pw.DatabaseError | pw.InterfaceError, committing: bool) -> Exception: ...

    def is_lost(self, exc: BaseException) -> bool: ...
