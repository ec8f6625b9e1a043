"""Doom-loop detection: the same tool called with identical input several times in a row.

The processor seed asks the user for permission (kind ``doom_loop``) when the last
``DOOM_LOOP_THRESHOLD`` (3) tool calls are the same tool with the same input. Inputs are
compared by canonical JSON, so key order and whitespace never hide a repeat.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

#: the seed's DOOM_LOOP_THRESHOLD
DEFAULT_DOOM_LOOP_THRESHOLD = 3


def canonical_input(arguments: Any) -> str:
    """``arguments`` as canonical JSON (sorted keys, no insignificant whitespace)."""
    return json.dumps(
        arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )


def is_doom_loop(
    recent_calls: Sequence[tuple[str, Any]], threshold: int = DEFAULT_DOOM_LOOP_THRESHOLD
) -> bool:
    """True when the last ``threshold`` entries of ``recent_calls`` ((name, arguments),
    oldest first, the current call last) are one tool with identical input."""
    if threshold < 1 or len(recent_calls) < threshold:
        return False
    last = recent_calls[-threshold:]
    name, arguments = last[0]
    first_input = canonical_input(arguments)
    return all(n == name and canonical_input(a) == first_input for n, a in last[1:])
