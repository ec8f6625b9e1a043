"""Stall detection over the tool calls a model makes, as pure functions.

Three patterns break the direct loop (and trigger the summary epilogue):

* ``REPEAT`` — the same normalized call ``max_repeats`` (3) times in a row (seed);
* ``SAME_TOOL`` — the same tool name ``max_same_tool`` (5) times in a row, whatever
  the arguments (seed);
* ``PING_PONG`` — the last ``ping_pong_window`` (6) calls alternate A, B, A, B, … with
  A ≠ B (beyond the seed: OpenHands' stuck detector shows models oscillating between
  two calls, which the two seed rules never catch).

One *step* is one model response with tool calls: its key joins the normalized keys of
all its calls, so a response with several calls repeats only if all of them do (the
seed compares iteration to iteration, not call to call).

Scope: the tracker lives for the session, not the user turn. A model that repeats the
same call at the start of every "continue" turn is stuck just the same, and a per-turn
reset would hide it. After a stall has been reported (and handled by the summary
epilogue) the loop starts a fresh tracker, so a user asking for that call again gets it.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from corvid_actors.providers.base import ToolCall


class StallKind(enum.StrEnum):
    """Why the loop stalled; the value is the result's ``termination_reason``."""

    REPEAT = "stall_repeat"
    SAME_TOOL = "stall_same_tool"
    PING_PONG = "stall_ping_pong"


class RepeatConfig(Protocol):
    """The settings the detectors read (DirectLoopSettings has them)."""

    @property
    def max_repeats(self) -> int: ...

    @property
    def max_same_tool(self) -> int: ...

    @property
    def ping_pong_window(self) -> int: ...


def _normalize_value(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        return {str(key): _normalize_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalize_value(item) for item in value]
    return value


def normalize_call(name: str, args: dict[str, Any]) -> str:
    """A canonical key for one call: sorted keys, whitespace-collapsed strings."""
    payload = {"name": name, "args": _normalize_value(args)}
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)


def step_key(calls: Sequence[ToolCall]) -> str:
    """The key of one step (all calls of one model response), for REPEAT and PING_PONG."""
    return "\n".join(normalize_call(call.name, call.arguments) for call in calls)


def step_names(calls: Sequence[ToolCall]) -> str:
    """The tool names of one step, in order, for SAME_TOOL."""
    return ",".join(call.name for call in calls)


def _same_tail(items: Sequence[str], count: int) -> bool:
    return count > 0 and len(items) >= count and len(set(items[-count:])) == 1


#: an alternation needs two full A, B rounds before it is a pattern
_MIN_PING_PONG_WINDOW = 4


def _ping_pong(keys: Sequence[str], window: int) -> bool:
    if window < _MIN_PING_PONG_WINDOW or len(keys) < window:
        return False
    tail = keys[-window:]
    first, second = tail[0], tail[1]
    if first == second:
        return False
    return all(key == (first if index % 2 == 0 else second) for index, key in enumerate(tail))


def detect_stall(
    keys: Sequence[str], names: Sequence[str], settings: RepeatConfig
) -> StallKind | None:
    """The stall the step history ends in, if any (REPEAT before SAME_TOOL before PING_PONG)."""
    if _same_tail(keys, settings.max_repeats):
        return StallKind.REPEAT
    if _same_tail(names, settings.max_same_tool):
        return StallKind.SAME_TOOL
    if _ping_pong(keys, settings.ping_pong_window):
        return StallKind.PING_PONG
    return None


@dataclass(frozen=True)
class RepeatTracker:
    """The recent steps of a session; :meth:`observe` returns a new tracker.

    Only as many steps are kept as the longest detector looks at.
    """

    keys: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    def observe(
        self, calls: Sequence[ToolCall], settings: RepeatConfig
    ) -> tuple[RepeatTracker, StallKind | None]:
        """Record one step; return the updated tracker and the stall it completes, if any."""
        keep = max(settings.max_repeats, settings.max_same_tool, settings.ping_pong_window)
        keys = (*self.keys, step_key(calls))[-keep:]
        names = (*self.names, step_names(calls))[-keep:]
        return RepeatTracker(keys, names), detect_stall(keys, names, settings)
