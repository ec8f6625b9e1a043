"""Retry policy: exponential backoff 2 s doubling, capped; retry-after wins, capped."""

import pytest

from corvid_actors.loop.retry import RetrySettings, retry_delay, should_retry
from corvid_actors.providers.base import ErrorKind, ProviderError

SETTINGS = RetrySettings()


@pytest.mark.parametrize(
    ("attempt", "retry_after_s", "expected"),
    [
        (1, None, 2.0),
        (2, None, 4.0),
        (3, None, 8.0),
        (4, None, 16.0),
        (5, None, 30.0),  # 32 s capped at cap_s
        (12, None, 30.0),
        (5000, None, 30.0),  # no overflow for absurd attempt numbers
        (1, 7.0, 7.0),  # retry-after wins over the 2 s backoff
        (4, 1.5, 1.5),  # ... also when it is shorter than the backoff
        (1, 0.0, 0.0),
        (1, 600.0, 60.0),  # retry-after capped at retry_after_cap_s
        (3, -1.0, 8.0),  # a negative hint is no hint
    ],
)
def test_retry_delay_table(attempt: int, retry_after_s: float | None, expected: float) -> None:
    assert retry_delay(attempt, retry_after_s, SETTINGS) == expected


def test_retry_delay_uses_settings() -> None:
    settings = RetrySettings(base_s=1.0, multiplier=3.0, cap_s=20.0, retry_after_cap_s=5.0)
    assert [retry_delay(n, None, settings) for n in (1, 2, 3, 4)] == [1.0, 3.0, 9.0, 20.0]
    assert retry_delay(1, 9.0, settings) == 5.0


def test_retry_delay_rejects_attempt_zero() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        retry_delay(0, None, SETTINGS)


def test_should_retry_only_retryable_errors_while_attempts_remain() -> None:
    retryable = ProviderError(ErrorKind.RETRYABLE, "overloaded", status=529)
    fatal = ProviderError(ErrorKind.FATAL, "bad key", status=401)
    overflow = ProviderError(ErrorKind.CONTEXT_OVERFLOW, "too long", status=400)
    # max_attempts=5 counts the first try: after failures 1..4 there is another try
    assert [should_retry(retryable, n, SETTINGS) for n in (1, 2, 3, 4, 5, 6)] == [
        True, True, True, True, False, False,
    ]
    assert not should_retry(fatal, 1, SETTINGS)
    assert not should_retry(overflow, 1, SETTINGS)
