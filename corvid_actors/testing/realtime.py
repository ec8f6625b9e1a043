"""Real time for test authors, whatever a :class:`~corvid_actors.testing.SimClock` froze.

While a SimClock is open, freezegun's frozen time is **process-wide**: ``time.monotonic()``,
``time.time()``, ``time.perf_counter()`` and ``datetime.now()`` return simulated time in
every module of the test process — the test's own code included (only the test runner, the
logger and the provider SDKs are left out: ``corvid_actors.testing.clock.REAL_TIME_MODULES``).
A test's own real-time bound, ``started = time.monotonic(); …; assert time.monotonic() -
started < 5``, then measures zero and passes whatever happened, and a polling loop bounded
by ``time.monotonic() + 5`` never ends.

Bound real waits with these instead: the genuine clock functions, saved by freezegun before
it patched anything (plain ``time`` functions when freezegun is not installed: the stub
servers of a plain install import this module too)::

    from corvid_actors.testing import real_monotonic

    started = real_monotonic()
    runtime.start_process(session.id, "hi")
    assert real_monotonic() - started < 5.0      # real seconds, even in a simulation
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["real_monotonic", "real_perf_counter", "real_time"]


def _genuine(name: str) -> Callable[[], float]:
    try:  # freezegun keeps the genuine functions as module attributes of freezegun.api
        import freezegun.api

        fn: Callable[[], float] = getattr(freezegun.api, f"real_{name}")
        return fn
    except ImportError:  # pragma: no cover - freezegun is a test dependency
        genuine: Callable[[], float] = getattr(time, name)
        return genuine


class _Genuine:
    """The genuine functions, as class attributes: freezegun rewrites a module's attributes
    that are time functions when it starts (FIELD-NOTES: stub servers), not a class's."""

    monotonic = staticmethod(_genuine("monotonic"))
    perf_counter = staticmethod(_genuine("perf_counter"))
    time = staticmethod(_genuine("time"))


def real_monotonic() -> float:
    """``time.monotonic()`` as it would be with no SimClock open: real seconds, for a test's
    bound on how long something takes, or on how long it polls."""
    return _Genuine.monotonic()


def real_perf_counter() -> float:
    """``time.perf_counter()`` of real time (see :func:`real_monotonic`)."""
    return _Genuine.perf_counter()


def real_time() -> float:
    """``time.time()`` of real time: the wall clock's seconds since the epoch, not the
    simulated date a SimClock set (see :func:`real_monotonic`)."""
    return _Genuine.time()
