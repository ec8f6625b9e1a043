"""Retry policy for retryable provider errors: exponential backoff honouring ``retry-after``.

Pure functions over a small settings object (the processor seed's ``SessionRetry``):
attempt 1 waits 2 s, each further attempt doubles, capped; a server ``retry-after`` hint
wins when given, capped on its own. The loop schedules the wait through the runtime's
``Timers`` (a ``Schedule`` effect), never by sleeping, so simulations see it in simulated
time and a stop aborts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from corvid_actors.providers.base import ProviderError


@dataclass(frozen=True)
class RetrySettings:
    """Backoff constants (seed values as defaults).

    ``max_attempts`` counts every attempt of one call, the first included: with 5, a call
    is tried at most 5 times (4 retries).
    """

    #: delay before the first retry, seconds
    base_s: float = 2.0
    #: factor applied per further retry (2 s, 4 s, 8 s, …)
    multiplier: float = 2.0
    #: longest computed backoff, seconds
    cap_s: float = 30.0
    #: longest wait a server's ``retry-after`` may impose, seconds
    retry_after_cap_s: float = 60.0
    #: attempts of one call, the first included
    max_attempts: int = 5


def retry_delay(attempt: int, retry_after_s: float | None, settings: RetrySettings) -> float:
    """Seconds to wait before retry number ``attempt`` (1 for the first retry).

    A non-negative ``retry_after_s`` (the server's hint) wins, capped at
    ``settings.retry_after_cap_s``; otherwise ``base_s * multiplier**(attempt-1)`` capped
    at ``settings.cap_s``.
    """
    if attempt < 1:
        raise ValueError(f"retry attempt numbers start at 1, got {attempt}")
    if retry_after_s is not None and retry_after_s >= 0:
        return min(float(retry_after_s), settings.retry_after_cap_s)
    try:
        backoff = settings.base_s * settings.multiplier ** (attempt - 1)
    except OverflowError:
        # a huge attempt number only ever means "as long as allowed"
        return settings.cap_s
    return min(backoff, settings.cap_s)


def should_retry(error: ProviderError, attempt: int, settings: RetrySettings) -> bool:
    """Whether a call that has failed ``attempt`` times (``error`` being the last failure)
    gets another try: only retryable errors, and only while attempts remain."""
    return error.retryable and attempt < settings.max_attempts
