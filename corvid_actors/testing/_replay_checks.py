"""What a replay checks: the session's events against the recorded ones, and the
invariants every explored interleaving must keep (issue 40)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from corvid_actors.events import Event
from corvid_actors.testing._recording import EventRow


def _fmt(row: EventRow) -> str:
    kind, t, fields = row
    shown = {k: v for k, v in fields.items() if v not in (None, "")}
    return f"{kind} at {t:.3f}s {shown}" if shown else f"{kind} at {t:.3f}s"


def _same_fields(want: dict[str, Any], got: dict[str, Any], content: bool) -> bool:
    for key, value in want.items():
        if key == "content" and not content:
            continue
        other = got.get(key)
        if isinstance(value, float) or isinstance(other, float):
            if other is None or value is None or not math.isclose(float(value), float(other), abs_tol=1e-6):
                return False
        elif other != value:
            return False
    return True


def compare_events(expected: Sequence[EventRow], replayed: Sequence[EventRow], *, time_tolerance_s: float,
                   content: bool = True) -> None:
    """AssertionError at the first replayed event that differs from the expected one (its
    type, a key field, or its time by more than ``time_tolerance_s``), or when one is missing
    or extra."""
    for i, want in enumerate(expected):
        if i >= len(replayed):
            last = _fmt(replayed[-1]) if replayed else "nothing"
            raise AssertionError(f"event {i + 1} of the recording never came in the replay: "
                                 f"{_fmt((want[0], float(want[1]), dict(want[2])))} (the replay ended after {last})")
        got = replayed[i]
        kind, t, fields = want
        if got[0] != kind or not _same_fields(dict(fields), got[2], content):
            raise AssertionError(f"event {i + 1} differs: recorded {_fmt((kind, t, dict(fields)))}, "
                                 f"replayed {_fmt(got)}")
        if abs(got[1] - float(t)) > time_tolerance_s:
            raise AssertionError(f"event {i + 1} ({kind}) came at {got[1]:.3f}s in the replay, recorded at "
                                 f"{float(t):.3f}s (tolerance {time_tolerance_s}s)")
    if len(replayed) > len(expected):
        raise AssertionError(f"the replay has more events than the recording; the first extra one: "
                             f"{_fmt(replayed[len(expected)])}")


def invariant_breaches(raw: Sequence[tuple[float, Event]], recording: Any, supervisor: Any) -> list[str]:
    """The invariants an interleaving breaks (empty: none): one reply per turn, nothing
    after ``session_stopped`` but a new start, credits never negative, restarts within the
    backoff (``restart_backoff_base_s`` × ``restart_backoff_multiplier`` ^ n, at most
    ``max_restarts`` in a row) and started when their delay has passed."""
    breaches: list[str] = []
    turns = len(recording.of("user"))
    results = [at for at, e in raw if e.type == "result"]
    if len(results) > turns:
        breaches.append(f"{len(results)} results for {turns} user turns (one reply per turn)")
    stopped = False
    for at, event in raw:
        if event.type == "session_stopped":
            stopped = True
        elif event.type == "session_started":
            stopped = False
        elif stopped:
            breaches.append(f"{event.type} at {at:.3f}s after session_stopped")
            break
        if event.type == "credits_low" and int(getattr(event, "remaining", 0) or 0) < 0:
            breaches.append(f"credits went negative ({getattr(event, 'remaining', None)}) at {at:.3f}s")
    base = float(getattr(supervisor, "restart_backoff_base_s", 5.0))
    factor = float(getattr(supervisor, "restart_backoff_multiplier", 3.0))
    most = int(getattr(supervisor, "max_restarts", 3))
    for i, (at, event) in enumerate(raw):
        if event.type != "session_restarting":
            continue
        attempt, delay = int(getattr(event, "attempt", 0)), float(getattr(event, "delay_s", 0.0))
        if attempt > most:
            breaches.append(f"restart attempt {attempt} beyond max_restarts {most}")
        bound = base * factor ** max(attempt - 1, 0)
        if delay > bound + 1e-6:
            breaches.append(f"restart {attempt} after {delay}s, beyond the backoff {bound}s")
        started = next((t for t, e in raw[i + 1:] if e.type == "session_started"), None)
        if started is not None and started + 1e-6 < at + delay:
            breaches.append(f"restart {attempt} started at {started:.3f}s, before its backoff ended "
                            f"({at + delay:.3f}s)")
    return breaches
