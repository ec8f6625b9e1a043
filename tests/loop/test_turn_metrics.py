"""TurnMetrics: the result's stall fields follow the termination reason (the original's
DirectProcessMetrics: stallDetected for every stall_* reason but exploration drift)."""

from __future__ import annotations

import pytest

from corvid_actors.loop.effects import TurnMetrics


@pytest.mark.parametrize("reason, detected, stall_type", [
    ("normal", False, None),
    ("max_iterations", False, None),
    ("error", False, None),
    ("payload_growth", False, None),
    ("stall_repeat", True, "stall_repeat"),
    ("stall_same_tool", True, "stall_same_tool"),
    ("stall_ping_pong", True, "stall_ping_pong"),
    ("stall_repetitive_loop", True, "stall_repetitive_loop"),
    ("stall_quality_exhausted", True, "stall_quality_exhausted"),
    ("stall_repetitive", True, "stall_repetitive"),
    ("stall_exploration", False, "stall_exploration"),
])
def test_stall_fields_follow_the_termination_reason(reason, detected, stall_type):
    metrics = TurnMetrics(termination_reason=reason).as_dict()
    assert (metrics["stall_detected"], metrics["stall_type"]) == (detected, stall_type)
    assert metrics["termination_reason"] == reason
