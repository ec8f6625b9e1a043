"""Retry policy for retryable provider errors: exponential backoff honouring ``retry-after``.

Pure functions over the retry table of a loop's config section (the processor seed's
``SessionRetry``; values in default.toml): attempt 1 waits 2 s, each further attempt
doubles, capped; a server ``retry-after`` hint wins when given, capped on its own. The loop schedules the wait through the runtime's
``Timers`` (a ``Schedule`` effect), never by sleeping, so simulations see it in simulated
time and a stop aborts it.
"""

from __future__ import annotations

from dataclasses import field

from corvid_actors.providers.base import ProviderError
from corvid_actors.schema.fields import AT_LEAST_ONE, POSITIVE, section


@section("sdk_loop.retry")
class RetrySettings:
    """The retry policy of provider calls: ``[sdk_loop.retry]`` and ``[direct_loop.retry]``
    of default.toml (this type's defaults are the SDK loop's table; the direct loop's
    section fills its own ``retry`` from its table).

    ``max_attempts`` counts every attempt of one call, the first included: with 5, a call
    is tried at most 5 times (4 retries).
    """

    #: delay before the first retry, seconds
    base_s: float = field(metadata=POSITIVE)
    #: factor applied per further retry (2 s, 4 s, 8 s, …)
    multiplier: float = field(metadata=AT_LEAST_ONE)
    #: longest computed backoff, seconds
    cap_s: float = field(metadata=POSITIVE)
    #: longest wait a server's ``retry-after`` may impose, seconds
    retry_after_cap_s: float = field(metadata=POSITIVE)
    #: attempts of one call, the first included
    max_attempts: int = field(metadata=AT_LEAST_ONE)


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
