"""Is the SQLite file still the store's? A write into a file deleted, replaced or made
read-only under the running store would be acknowledged and lost, so the store looks
before it writes — at most once per interval (issue 37: an ``os.stat`` per write was
~10 % of a ``send_message``), and at once when asked (a probe, the first write error)."""

from __future__ import annotations

import os
from collections.abc import Callable


class FileWatch:
    """The checks of one SQLite file; ``monotonic``: the store's clock. Thread-safe
    enough: two threads may both look when one interval ends (a spare ``stat``)."""

    def __init__(self, path: str, *, interval_s: float, monotonic: Callable[[], float]) -> None:
        if interval_s < 0:
            raise ValueError(f"file_check_interval_s must be at least 0 (got {interval_s!r})")
        self.path = path
        self.interval_s = interval_s
        self._monotonic = monotonic
        st = os.stat(path)
        self._file_id = (st.st_dev, st.st_ino)
        self._checked_at: float | None = None

    def fault(self, *, now: bool = False) -> str | None:
        """Why the file cannot be written (gone, replaced, read-only), or None — from a
        look at the file when ``now``, or when the last look is ``interval_s`` old (or
        found a fault); otherwise None without looking."""
        if not now and self.interval_s > 0:
            at = self._monotonic()
            checked = self._checked_at
            if checked is not None and at - checked < self.interval_s:
                return None
            self._checked_at = at
        fault = self.look()
        if fault is not None:
            self._checked_at = None  # every write looks again until the file is back
        return fault

    def look(self) -> str | None:
        """Look at the file now: why it cannot be written, or None."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return f"the database file {self.path} is gone (deleted or moved under the running store)"
        except OSError as exc:
            return f"the database file {self.path} cannot be checked ({exc})"
        if (st.st_dev, st.st_ino) != self._file_id:
            return f"the database file {self.path} was replaced under the running store"
        # The write bits, not os.access: root may write anything, yet a file made
        # read-only says the operator wants no writes (or the disk is being remounted).
        if not st.st_mode & 0o222 or not os.access(self.path, os.W_OK):
            return f"the database file {self.path} is read-only"
        return None
