"""Classification of everything the ``anthropic`` SDK can raise into a :class:`ProviderError`.

Pure functions, one decision table: the loop only ever sees :class:`ErrorKind`.

- transient (``RETRYABLE``): connection refused/reset/timed out, a stream dropped
  mid-reply (raw ``httpx2`` errors: the SDK does not wrap failures during iteration),
  HTTP 408/409/429/5xx/529, and in-stream ``error`` events of a transient type
  (``overloaded_error``, ``api_error``, ``rate_limit_error``, ``timeout_error``);
- ``CONTEXT_OVERFLOW``: ``invalid_request_error`` saying the prompt is too long, or 413;
- ``FATAL``: authentication/permission (401/403), other invalid requests (400), unknown
  models (404) and anything unrecognised. Never retried.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import Mapping

import anthropic
import httpx2

from corvid_actors.core.jsontypes import WireJson
from corvid_actors.providers.base import ErrorKind, ProviderError

#: statuses below 500 that are worth retrying (timeout, conflict, rate limit)
RETRYABLE_STATUSES = frozenset({408, 409, 429})
#: every status from here up is a server-side failure (529 overloaded included)
SERVER_ERROR_MIN_STATUS = 500
#: HTTP 413: the request body is too big, which shrinking the conversation cures
REQUEST_TOO_LARGE_STATUS = 413
#: error types (in a body or an in-stream ``error`` event) that are transient
RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
_AUTH_STATUSES = frozenset({401, 403})
_MS_PER_S = 1000.0
_CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long|context (window|length|limit)|exceeds? the model'?s? (maximum )?context",
    re.IGNORECASE,
)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date).

    An HTTP date is measured against the response's own ``date`` header (no clock
    read here); without one it is ignored.
    """
    for name, scale in (("retry-after-ms", _MS_PER_S), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / scale)
        except ValueError:
            pass
    when, now = headers.get("retry-after"), headers.get("date")
    if when and now:
        try:
            delta = email.utils.parsedate_to_datetime(when) - email.utils.parsedate_to_datetime(now)
        except (TypeError, ValueError):
            return None
        return max(0.0, delta.total_seconds())
    return None


def is_context_overflow_message(message: str) -> bool:
    """Does an ``invalid_request_error`` message say the prompt exceeds the context window?"""
    return bool(_CONTEXT_OVERFLOW.search(message))


def classify_anthropic_error(exc: BaseException) -> ProviderError:
    """The one place that decides how the runtime reacts to an Anthropic failure."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, anthropic.APIStatusError):
        return _classify_status(exc)
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderError(ErrorKind.RETRYABLE, "Anthropic API request timed out; will retry",
                             error_type="timeout")
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc
        return ProviderError(ErrorKind.RETRYABLE, f"cannot reach the Anthropic API ({cause!r}); will retry",
                             error_type="connection_error")
    if isinstance(exc, httpx2.TimeoutException | httpx2.NetworkError | httpx2.RemoteProtocolError
                  | httpx2.ProxyError | ConnectionError | TimeoutError):
        # Raised raw by the SDK while iterating a stream: a drop, a reset, a stall.
        return ProviderError(ErrorKind.RETRYABLE, f"Anthropic stream failed ({exc!r}); will retry",
                             error_type="connection_error")
    return ProviderError(ErrorKind.FATAL, f"unexpected Anthropic client error: {exc!r}")


def _classify_status(exc: anthropic.APIStatusError) -> ProviderError:
    status = exc.status_code
    error_type = exc.type or _body_error_type(exc.body)
    message = exc.api_message or str(exc)
    if status < 400:
        # An in-stream `error` event: the HTTP status was 200, the body's type decides.
        return _classify_type(error_type, message)
    retry_after = parse_retry_after(exc.response.headers)
    described = f"Anthropic API {status} {error_type or 'error'}: {message}"
    if status in _AUTH_STATUSES:
        return ProviderError(ErrorKind.FATAL, f"{described} (check the API key and its permissions)",
                             status=status, error_type=error_type)
    if status in RETRYABLE_STATUSES or status >= SERVER_ERROR_MIN_STATUS:
        return ProviderError(ErrorKind.RETRYABLE, described, status=status,
                             retry_after_s=retry_after, error_type=error_type)
    if status == REQUEST_TOO_LARGE_STATUS or is_context_overflow_message(message):
        return ProviderError(ErrorKind.CONTEXT_OVERFLOW, described, status=status, error_type=error_type)
    return ProviderError(ErrorKind.FATAL, described, status=status, error_type=error_type)


def _classify_type(error_type: str | None, message: str) -> ProviderError:
    described = f"Anthropic stream error {error_type or 'unknown'}: {message}"
    if error_type in RETRYABLE_ERROR_TYPES:
        return ProviderError(ErrorKind.RETRYABLE, described, error_type=error_type)
    if error_type == "invalid_request_error" and is_context_overflow_message(message):
        return ProviderError(ErrorKind.CONTEXT_OVERFLOW, described, error_type=error_type)
    return ProviderError(ErrorKind.FATAL, described, error_type=error_type)


def _body_error_type(body: WireJson) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    value = error.get("type") if isinstance(error, dict) else None
    return value if isinstance(value, str) else None
