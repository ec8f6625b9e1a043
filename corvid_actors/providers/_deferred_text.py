"""Streamed text shown one delta per network chunk on the I/O loop (both providers).

A provider's async stream parses every line (Ollama) or SSE event (Anthropic) of one
network chunk without returning to the event loop; :class:`DeferredText` gathers their
text and shows it as one piece when the loop next runs its callbacks (``call_soon``) —
right after the chunk, before the next read. At a model's usual pace a chunk holds one
token; while the runtime reads behind a fast server, hundreds. Whatever else the stream
shows (a tool call, the end, an error) calls :meth:`DeferredText.flush` first, so the
order and the text are the same as one delta per piece.

The flush runs as a loop callback, where asyncio would only log an exception: what the
subscriber raises there is kept and raised by :meth:`DeferredText.raise_failed`, which
the stream calls on its next piece and at its end, so the call fails as it would have.
"""

from __future__ import annotations

from collections.abc import Callable

#: the I/O loop's ``call_soon``
Soon = Callable[[Callable[[], None]], object]


class DeferredText:
    """See the module docstring. ``show(text)`` shows text (a ``TextDelta``); without
    ``soon`` every piece is shown at once. Used on the I/O loop's thread only."""

    __slots__ = ("_show", "_soon", "_pending", "_flush_due", "_failed")

    def __init__(self, show: Callable[[str], None], soon: Soon | None) -> None:
        self._show = show
        self._soon = soon
        self._pending: list[str] = []
        self._flush_due = False
        self._failed: BaseException | None = None

    def add(self, text: str) -> None:
        """One piece of streamed text: shown at once, or at the loop's next callbacks."""
        if self._soon is None:
            self._show(text)
            return
        self._pending.append(text)
        if not self._flush_due:
            self._flush_due = True
            self._soon(self._flush_soon)

    def flush(self) -> None:
        """Show what is pending as one piece (nothing when nothing is)."""
        self._flush_due = False
        pending, self._pending = self._pending, []
        if pending:
            self._show(pending[0] if len(pending) == 1 else "".join(pending))

    def raise_failed(self) -> None:
        """Raise what the subscriber raised in a deferred flush, if it did."""
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed

    def _flush_soon(self) -> None:
        try:
            self.flush()
        except BaseException as exc:  # noqa: BLE001 - kept for the stream to raise (see raise_failed)
            self._failed = exc
