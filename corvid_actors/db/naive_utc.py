"""The cluster tables' times: naive UTC in the columns (``models._now``), aware UTC in
Python. :mod:`corvid_actors.db.cluster` and :mod:`corvid_actors.db.daemon_registry`
convert at the boundary, so a caller hands in and gets back aware times only."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def naive(moment: datetime) -> datetime:
    """``moment`` as a column holds it: an aware time converted to naive UTC; a naive one
    is taken as UTC already."""
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def naive_or_none(moment: datetime | None) -> datetime | None:
    """:func:`naive`, None kept."""
    return None if moment is None else naive(moment)


def aware(value: Any) -> datetime | None:
    """A column's value as an aware UTC time (SQLite hands text back); None kept."""
    if value is None:
        return None
    if isinstance(value, str):  # SQLite hands text back
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
