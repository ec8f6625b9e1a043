"""The simulated clock freezes the code under test, not the test runner or the logger, and
leaves no process-wide freezegun option behind."""

from __future__ import annotations

import io
import time

import freezegun.api
from _pytest import timing
from loguru import logger

from corvid_actors.testing import SimClock


def test_pytest_and_loguru_keep_real_time_while_the_clock_is_frozen():
    real_before = time.time()  # tests are outside the freeze list: this is real time now
    clock = SimClock()  # frozen at 2026-01-01T00:00Z
    try:
        clock.advance(3600)
        assert time.time() == clock.now().timestamp()  # the code under test sees simulated time
        assert abs(timing.Instant().time - real_before) < 60  # pytest's --durations clock is real
        out = io.StringIO()
        sink = logger.add(out, format="{time:YYYY-MM-DD!UTC}", level="INFO")
        try:
            logger.info("a line")
        finally:
            logger.remove(sink)
        assert out.getvalue().strip() != "2026-01-01"  # log lines carry real time
    finally:
        clock.close()


def test_closing_the_clock_restores_freezegun_options():
    before = freezegun.api.call_stack_inspection_limit
    assert before != 0  # no clock of an earlier test left it changed
    outer, inner = SimClock(), SimClock()  # nested freezes close inner first (freezegun's rule)
    assert freezegun.api.call_stack_inspection_limit == 0  # consistent time for every caller while open
    inner.close()
    assert freezegun.api.call_stack_inspection_limit == 0  # the outer clock is still open
    outer.close()
    inner.close()  # closing twice changes nothing
    assert freezegun.api.call_stack_inspection_limit == before
