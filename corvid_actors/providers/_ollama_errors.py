"""Classification of everything the ``ollama`` client can raise into a :class:`ProviderError`.

Pure functions, one decision table, so the loop only ever sees :class:`ErrorKind`.
The client is not consistent about what it raises: ``ResponseError`` with the HTTP
status, or with status -1 for an error line inside a stream; builtin
``ConnectionError`` for a refused connection on plain calls but the raw
``httpx.ConnectError`` while streaming; raw httpx errors for resets, a peer that
closes mid-stream and timeouts.

- ``TOOLS_UNSUPPORTED``: "does not support tools" (and similar texts);
- ``CONTEXT_OVERFLOW``: context-length texts (reference §4's list, or exceed+context);
- ``RETRYABLE``: 5xx, 408, 409, 425, 429; connection refused/reset, mid-stream drops,
  timeouts; in-stream errors whose text says the trouble is transient;
- ``FATAL``: everything else (401, 404 model not found, invalid requests, bugs).
"""

from __future__ import annotations

import httpx
import ollama

from corvid_actors.providers.base import ErrorKind, ProviderError

#: Error texts meaning the prompt does not fit (reference §4, error recovery).
_OVERFLOW_PATTERNS = (
    "prompt is too long",
    "context_length_exceeded",
    "context length exceeded",
    "request too large",
    "maximum context length",
    "token limit",
    "input is too long",
    "too many tokens",
)
#: Error texts meaning the model takes no tool definitions.
_TOOLS_PATTERNS = ("does not support tools",)
#: Error texts of transient trouble when no status code says so (in-stream errors,
#: Ollama cloud proxy errors, a runner that died of memory pressure).
_RETRYABLE_PATTERNS = (
    "timed out after",
    "api request returned none",
    "server busy",
    "overloaded",
    "try again",
    "connection reset",
    "connection refused",
    "socket hang up",
    "out of memory",
    "unexpectedly stopped",
    "error was encountered while running the model",
    "too many requests",
    "rate limit",
    "econnreset",
    "econnrefused",
)
#: HTTP statuses that are upstream trouble rather than a bad request.
_RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
_SERVER_ERROR_MIN = 500


def _is_overflow(text: str) -> bool:
    return any(p in text for p in _OVERFLOW_PATTERNS) or ("exceed" in text and "context" in text)


def _is_tools_unsupported(text: str) -> bool:
    return (
        any(p in text for p in _TOOLS_PATTERNS)
        or ("tool" in text and "not supported" in text)
        or ("unknown parameter" in text and "tool" in text)
    )


def classify_text(message: str, status: int | None) -> ErrorKind:
    """The kind of a failure described by an error text and an optional HTTP status."""
    text = message.lower()
    if _is_tools_unsupported(text):
        return ErrorKind.TOOLS_UNSUPPORTED
    if _is_overflow(text):
        return ErrorKind.CONTEXT_OVERFLOW
    if status is not None and (status >= _SERVER_ERROR_MIN or status in _RETRYABLE_STATUSES):
        return ErrorKind.RETRYABLE
    if any(p in text for p in _RETRYABLE_PATTERNS):
        return ErrorKind.RETRYABLE
    return ErrorKind.FATAL


def classify_ollama_error(exc: BaseException) -> ProviderError:
    """Turn anything the ollama client (or httpx under it) raised into a ProviderError.

    - ``ollama.ResponseError``: by text (tools unsupported, context overflow) then by
      status (5xx, 408, 409, 429 → retryable). In-stream errors carry status -1.
    - builtin ``ConnectionError`` (refused on plain calls), ``TimeoutError`` and other
      socket ``OSError`` → retryable.
    - raw httpx transport errors (refused while streaming, reset, peer closed mid-stream,
      timeouts) → retryable; a malformed URL or our own protocol misuse → fatal.
    - anything else (invalid JSON, validation errors, bugs) → fatal.
    """
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, ollama.ResponseError):
        status = exc.status_code if exc.status_code and exc.status_code > 0 else None
        message = str(exc.error)
        return ProviderError(classify_text(message, status), f"ollama: {message}", status=status)
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return ProviderError(classify_text(str(exc), status), f"ollama: {exc}", status=status)
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError | httpx.InvalidURL):
        return ProviderError(ErrorKind.FATAL, f"ollama: bad request or host: {exc}")
    if isinstance(exc, httpx.TransportError | ConnectionError | TimeoutError | OSError):
        detail = str(exc) or type(exc).__name__
        return ProviderError(ErrorKind.RETRYABLE, f"ollama unreachable or stream broken: {detail}")
    if isinstance(exc, ollama.RequestError):
        return ProviderError(ErrorKind.FATAL, f"ollama: invalid request: {exc.error}")
    return ProviderError(ErrorKind.FATAL, f"ollama: unexpected {type(exc).__name__}: {exc}")
