"""The I/O loop's ``call_soon``, run by hand, for the deferred-text tests of both providers."""

from __future__ import annotations

from collections.abc import Callable


class Soon:
    """Callbacks wait until :meth:`run` (the loop running its callbacks after a chunk)."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []

    def __call__(self, callback: Callable[[], None]) -> None:
        self.pending.append(callback)

    def run(self) -> None:
        pending, self.pending = self.pending, []
        for callback in pending:
            callback()
