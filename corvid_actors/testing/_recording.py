"""A session's journal as read back for a replay: :class:`Recording` (issue 40)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corvid_actors.db.journal import JournalStore
from corvid_actors.db.store import Store

#: one event as a replay compares it: its type, seconds since the start, its key fields
EventRow = tuple[str, float, dict[str, Any]]


@dataclass
class Recording:
    """One session's journal, times made relative to its first entry (seconds).

    ``entries``: dicts with ``t`` (seconds since the first entry), ``kind`` (``start``,
    ``user``, ``model``, ``tool``, ``approval``, ``crash``, ``probe``, ``event``) and the entry's data, in the
    order they were written. ``capture_content``: False when the journal kept shapes and
    timings only — then text cannot be replayed (stand-ins of the same length are)."""

    session_id: str
    entries: list[dict[str, Any]]
    capture_content: bool = True
    #: the wall-clock time of the first entry (seconds since the epoch)
    started_at: float = 0.0

    @classmethod
    def from_rows(cls, session_id: str, rows: Sequence[tuple[float, str, Any]]) -> Recording:
        """From :meth:`JournalStore.entries` rows ``(at, kind, data)``."""
        if not rows:
            raise ValueError(f"session {session_id} has no journal entries (is [journal] enabled for its agent?)")
        t0 = min(at for at, _kind, _data in rows)
        entries = []
        for at, kind, data in rows:
            entry = dict(data)
            for key in ("requested_at", "ended_at", "first_chunk_at"):
                if entry.get(key) is not None:
                    entry[key] = round(float(entry[key]) - t0, 6)
            entries.append({"t": round(at - t0, 6), "kind": kind, **entry})
        starts = [e for e in entries if e["kind"] == "start"]
        if not starts:
            raise ValueError(f"session {session_id}'s journal has no start entry (it was cut by the retention)")
        return cls(session_id, entries, capture_content=all(bool(s.get("capture_content")) for s in starts),
                   started_at=t0)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recording:
        return cls(str(data["session_id"]), [dict(e) for e in data["entries"]],
                   capture_content=bool(data.get("capture_content", True)),
                   started_at=float(data.get("started_at", 0.0)))

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "capture_content": self.capture_content,
                "started_at": self.started_at, "entries": self.entries}

    def of(self, *kinds: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["kind"] in kinds]

    @property
    def start(self) -> dict[str, Any]:
        return self.of("start")[0]

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The model and tool calls, in the order the session made them."""
        return self.of("model", "tool")

    @property
    def crashes(self) -> list[tuple[int, dict[str, Any]]]:
        """The actor's crashes, each with its step: the model and tool calls before it."""
        out, steps = [], 0
        for entry in self.entries:
            if entry["kind"] in ("model", "tool"):
                steps += 1
            elif entry["kind"] == "crash":
                out.append((steps, entry))
        return out

    @property
    def events(self) -> list[EventRow]:
        """The recorded events as ``(type, t, key fields)``."""
        return [(e["type"], e["t"], {k: v for k, v in e.items() if k not in ("t", "kind", "type")})
                for e in self.of("event")]

    @property
    def end(self) -> float:
        return max((float(e.get("ended_at") or e["t"]) for e in self.entries), default=0.0)


def load_recording(source: Any, session_id: str) -> Recording:
    """The journal of ``session_id`` in ``source``: a ``Runtime``, a ``Store``, or a store URL."""
    owned = None
    if isinstance(source, str):
        store = owned = Store(source)
    else:
        internals = getattr(source, "internals", None)
        store = internals.store if internals is not None else source
        journal = getattr(internals, "journal", None)
        if journal is not None:
            journal.entries.flush()  # what it queued is readable
    try:
        rows = JournalStore(store, writer=False).entries(session_id)
    finally:
        if owned is not None:
            owned.close()
    return Recording.from_rows(session_id, rows)
