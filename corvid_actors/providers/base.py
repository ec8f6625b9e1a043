"""The provider boundary: the types every model provider speaks and the errors it raises.

A provider turns a :class:`ModelRequest` into a :class:`ModelResponse`, streaming
text to a callback as it arrives. It runs on a session's worker thread (never on an
actor thread) and must return promptly when its :class:`CancelToken` is cancelled,
closing any HTTP stream it holds.

Provider errors are classified *once*, here, into :class:`ErrorKind`; loops never
inspect client-library exceptions.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeGuard, runtime_checkable

from corvid_actors.core.vocabulary import CancelToken, ToolSpec
from corvid_actors.errors import CorvidError

Role = Literal["user", "assistant", "tool", "system"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call requested by the model.

    ``arguments`` is the parsed JSON object. When the model sent arguments that are not
    a JSON object, ``arguments`` is empty and ``arguments_error`` says what was wrong
    (the loop answers the model with that error instead of running the tool).
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    arguments_error: str | None = None


@dataclass(frozen=True)
class ChatMessage:
    """One entry of a conversation, provider-neutral.

    ``role == "tool"`` carries a tool result: ``tool_call_id`` and ``tool_name`` say
    which call it answers and ``is_error`` whether the tool failed.

    A multimodal user message keeps its content blocks (text and image, the Messages
    API's shape; see :mod:`corvid_actors.content`) in ``blocks``, and their text parts in
    ``content``: providers that take images send the blocks, the others the text.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    blocks: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class ModelRequest:
    """One model call: the system prompt, the conversation so far and the tools offered.

    ``session_id`` and ``generation`` say which session incarnation makes the call (the
    session actor fills them in; a loop used on its own leaves them empty). Generations
    count up within one Runtime (the ``generation`` of ``session_started``). Providers may
    use them for routing or logging; the scripted provider keys its per-session scripts
    on them. ``at`` is when the call was made, in seconds of the runtime's clock
    (``clock.monotonic()``: simulated seconds since the start under a ``SimClock``, the
    time base of ``EventRecorder``'s ``Recorded.at``), stamped by the session actor as it
    makes the call — before any latency; None for a request no session actor made.
    """

    model: str
    system: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None
    session_id: str = ""
    generation: int = 0
    at: float | None = None


@dataclass(frozen=True)
class Usage:
    """Token counts reported by the provider for one call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


@dataclass(frozen=True)
class ModelResponse:
    """The outcome of one successful model call."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str = "end_turn"
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    model: str = ""


@dataclass(frozen=True)
class ModelInfo:
    """What a provider knows about a model (used for slot weights and context budgets)."""

    name: str
    context_window: int
    parameter_size_b: float | None = None
    #: the model takes images (Ollama: the ``vision`` capability); None when unknown
    supports_images: bool | None = None


# --- streaming -----------------------------------------------------------------------


@dataclass(frozen=True)
class TextDelta:
    """A chunk of assistant text, as streamed."""

    text: str


@dataclass(frozen=True)
class ToolCallStarted:
    """The model began a tool call (Anthropic streams these before the arguments)."""

    id: str
    name: str


StreamEvent = TextDelta | ToolCallStarted
StreamCallback = Callable[[StreamEvent], None]


# --- errors --------------------------------------------------------------------------


class ErrorKind(enum.Enum):
    """How the runtime reacts to a provider failure."""

    #: transient upstream trouble (connection refused/reset, mid-stream drop, 5xx, 408,
    #: 409, 429, 529 overloaded). Retried where the loop retries; counts toward an outage.
    RETRYABLE = "retryable"
    #: the prompt does not fit the model's context window.
    CONTEXT_OVERFLOW = "context_overflow"
    #: the model does not accept tool definitions.
    TOOLS_UNSUPPORTED = "tools_unsupported"
    #: anything else (auth, invalid request, unknown). Never retried.
    FATAL = "fatal"


class ProviderError(CorvidError):
    """A classified provider failure (a :class:`~corvid_actors.errors.CorvidError`).

    ``retry_after_s`` carries the server's ``retry-after`` hint when it sent one;
    ``error_type`` the provider's own error type (e.g. ``overloaded_error``).
    """

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after_s = retry_after_s
        self.error_type = error_type

    @property
    def retryable(self) -> bool:
        """Whether the call may be retried (``kind`` is ``RETRYABLE``: a connection drop, a 5xx, a rate
        limit)."""
        return self.kind is ErrorKind.RETRYABLE

    def __repr__(self) -> str:
        return f"ProviderError({self.kind.value}, {self.message!r}, status={self.status})"


class SessionExit(Exception):
    """Raised by a provider's ``stream`` to end the calling incarnation as if its process
    had exited with ``code`` (0: a clean exit, the session goes idle; otherwise the
    supervisor treats it as a crash). Nothing more of the turn is published.

    Real providers have no use for it; the scripted provider raises it for a scripted
    clean exit (``corvid_actors.testing.Turn.clean_exit``).
    """

    def __init__(self, code: int = 0) -> None:
        super().__init__(f"session exit requested (code {code})")
        self.code = code


@dataclass(frozen=True)
class ProviderTraits:
    """What the runtime asks of a provider, instead of comparing names (see ``traits_of``)."""

    #: sessions hold a SlotPool slot (weighted by model size) during each model call: a
    #: local model server runs a bounded number of inferences at once
    uses_slots: bool = False
    #: the supervisor's pseudo-PID range for its sessions: "sdk" (``supervisor.sdk_pid_base``)
    #: or "direct" (``supervisor.direct_pid_base``)
    pid_kind: Literal["sdk", "direct"] = "direct"


#: the traits of a provider that declares none (a host's own provider written before them)
DEFAULT_TRAITS = ProviderTraits()


def traits_of(provider: object) -> ProviderTraits:
    """``provider.traits``, or :data:`DEFAULT_TRAITS` when it declares none."""
    traits = getattr(provider, "traits", None)
    return traits if isinstance(traits, ProviderTraits) else DEFAULT_TRAITS


@runtime_checkable
class Provider(Protocol):
    """A model provider. Every method may block; call it from a worker thread."""

    #: short name used in config and routing ("ollama", "anthropic", "scripted")
    name: str
    #: how the runtime treats its sessions (slots, pid range)
    traits: ProviderTraits

    def stream(
        self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken
    ) -> ModelResponse:
        """Run one model call, calling ``on_event`` per streamed chunk.

        Raises :class:`ProviderError` (classified) or :class:`StreamCancelled`.
        """
        ...

    def health(self) -> bool:
        """A cheap probe: is the upstream answering at all?"""
        ...

    def model_info(self, model: str) -> ModelInfo:
        """Context window and size of ``model`` (falls back to configured defaults)."""
        ...


#: An optional provider method, not part of the protocol: ``before_start(session_id)`` is
#: called while an incarnation of a session routed to the provider is being built; if it
#: raises, the start fails (an ``error`` event of type ``spawn_error``). The scripted
#: provider uses it for scripted start failures.
BEFORE_START_HOOK = "before_start"


@runtime_checkable
class AsyncStreaming(Protocol):
    """A provider that can also stream on the runtime's I/O loop (issue 18).

    ``astream`` is :meth:`Provider.stream` as a coroutine: the session actor runs it as a
    task on the runtime's one asyncio loop (:mod:`corvid_actors.core.io_loop`) instead of on a
    worker thread. It must not block the loop (no synchronous I/O; a rare blocking lookup
    goes to ``run_in_executor``); cancelling its task must close the HTTP stream and raise
    :class:`StreamCancelled`; ``on_event`` is called on the loop's thread, and may get the
    text of the chunks read together as one :class:`TextDelta` (same text, same order). A provider
    without it (the scripted provider, a host's own) keeps running on worker threads.
    """

    async def astream(
        self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken
    ) -> ModelResponse:
        ...


#: how a :class:`ClockStreaming` call reports its end: the reply, or the exception the
#: call would have raised (exactly one of the two is not None)
CallDone = Callable[[ModelResponse | None, BaseException | None], None]


@runtime_checkable
class ClockStreaming(Protocol):
    """A provider whose call can run without a thread of its own under a simulated clock.

    ``stream_soon`` starts the call on the calling thread and returns at once: a wait is a
    timer on the provider's clock, not a blocked thread, and ``done`` is called exactly once
    with the outcome (on the clock's thread, or at once), unless ``cancel`` fires first, in
    which case it is never called. It returns False, having done nothing, when it cannot
    (a subclass that overrides ``stream``): the call then runs on a worker as usual. The
    session actor uses it only under the inline dispatcher of a simulation (issue 18): the
    scripted provider's model calls then cost no worker thread.
    """

    def stream_soon(self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken,
                    done: CallDone) -> bool:
        ...


def streams_async(provider: object) -> TypeGuard[AsyncStreaming]:
    """``isinstance(provider, AsyncStreaming)`` at the cost of one attribute read: the
    runtime protocol check (about as costly as a message) ran for every model call."""
    return getattr(provider, "astream", None) is not None


def streams_on_clock(provider: object) -> TypeGuard[ClockStreaming]:
    """``isinstance(provider, ClockStreaming)`` at the cost of one attribute read (see
    :func:`streams_async`)."""
    return getattr(provider, "stream_soon", None) is not None
