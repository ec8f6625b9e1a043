"""A session's recent history for ``corvid-actors events ID`` (pure, no actor, no I/O).

Two sources are joined on their times: what the store holds (the messages — user,
assistant, and the runtime's ``system`` exit notes — which survive a restart of the
daemon) and the AdminActor's ring of the session's recent events (``RecentEvents``: the
last ``daemon.recent_events`` events, in memory only, lost when the daemon restarts). A
stored assistant message the ring also saw as an ``assistant`` event is shown once, from
the ring.

Which part is shown: ``since_iso`` (items at or after that time), ``tail`` (the last
``tail`` items), or by default the current turn and the last finished one — from the
user message that began the last finished turn (the last ``result`` event, or a stored
assistant answer when the ring has none, e.g. after a restart) to the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from corvid_actors.clock import iso_utc

#: the event type a stored message is shown as (its ``role`` says whose it is)
STORED_MESSAGE = "message"
#: what ends a turn: the loop's result, or (from the store alone) the assistant's answer
_TURN_ENDS = frozenset({"result"})


def stored_items(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """Stored messages (``StoredMessage``-like: ``role``, ``content``, ``timestamp``) as
    history items ``{"at", "type": "message", "role", "text", "stored": True}``."""
    return [{"at": iso_utc(m.timestamp), "type": STORED_MESSAGE, "role": m.role, "text": m.content,
             "stored": True} for m in messages]


def merged(stored: Sequence[Mapping[str, Any]], recent: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The stored items and the ring's events (each with ``at``) in time order; a stored
    assistant message at or after the ring's first event, or one whose text the ring holds
    as an ``assistant`` event, is left to the ring. (The two are stamped apart: the row
    when it is committed, the event when the admin actor sees it — under load the row can
    be older than the ring's first event and still be the same reply.)"""
    ring_from = recent[0]["at"] if recent else None
    ring_replies = {e.get("content") for e in recent if e.get("type") == "assistant"}
    kept = [dict(item) for item in stored
            if not (item["role"] == "assistant" and ring_from is not None
                    and (item["at"] >= ring_from or item["text"] in ring_replies))]
    # a stable sort: at equal times a stored message (the user's prompt) comes first
    return sorted([*kept, *(dict(e) for e in recent)], key=lambda item: item["at"])


def _ends_turn(item: Mapping[str, Any], ring_has_results: bool) -> bool:
    if item["type"] in _TURN_ENDS:
        return True
    return not ring_has_results and item["type"] == STORED_MESSAGE and item.get("role") == "assistant"


def current_and_last_turn(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """From the user message that began the last finished turn to the end (the current
    turn, if any, and whatever followed: exit notes, stop events); everything when no
    turn has finished."""
    ring_has_results = any(item["type"] in _TURN_ENDS for item in items)
    ends = [i for i, item in enumerate(items) if _ends_turn(item, ring_has_results)]
    if not ends:
        return list(items)
    last_end = ends[-1]
    starts = [i for i in range(last_end) if items[i]["type"] == STORED_MESSAGE and items[i].get("role") == "user"]
    if starts:
        return list(items[starts[-1]:])
    previous_end = ends[-2] if len(ends) > 1 else -1
    return list(items[previous_end + 1:])


def select(items: Sequence[dict[str, Any]], *, since_iso: str | None = None,
           tail: int | None = None) -> list[dict[str, Any]]:
    """The part of ``items`` (time order) an operator asked for (see the module docstring)."""
    chosen = list(items)
    if since_iso is not None:
        chosen = [item for item in chosen if item["at"] >= since_iso]
    if tail is not None:
        chosen = chosen[-tail:] if tail else []
    if since_iso is None and tail is None:
        chosen = current_and_last_turn(chosen)
    return chosen
