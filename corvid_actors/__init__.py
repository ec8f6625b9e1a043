"""corvid-actors: supervised Pykka actors hosting long-running LLM agent sessions.

The names below are the public API (``__all__``); everything else is reached through its
own public module (``corvid_actors.testing`` for simulations and stub servers,
``corvid_actors.chat`` for the chat bridge, ``corvid_actors.aio`` for asyncio hosts) or is
internal. As httpx does, the names report ``corvid_actors`` as their module, so reprs and
documentation show the public path (``corvid_actors.ToolSpec``, not
``corvid_actors.core.vocabulary.ToolSpec``).

``Runtime``, ``AsyncRuntime`` and the two real providers load the actors, the store and
the providers' HTTP clients; they, the configuration and the providers' and tools' base
types are imported on first use (PEP 562), so that importing the package — which every
``corvid-actors`` command does, ``--help`` too — stays fast.

As a library, corvid-actors logs nothing until the application asks for its logs
(loguru's convention for libraries): ``from loguru import logger;
logger.enable("corvid_actors")``. The ``corvid-actors`` command line and the daemon
enable them.
"""

from __future__ import annotations

import importlib
import types
import typing
from typing import TYPE_CHECKING, Any

from loguru import logger

from corvid_actors.core.vocabulary import (
    ApprovalPolicy,
    CancelToken,
    Permission,
    PermissionDecision,
    Review,
    StreamCancelled,
    ToolKind,
    ToolResult,
    ToolSpec,
)
from corvid_actors.errors import (
    AdminError,
    ConfigError,
    ConflictError,
    CorvidError,
    CreditAmountError,
    InvalidContentError,
    NotFoundError,
    RuntimeStoppedError,
    SettleTimeout,
    StoreError,
    StoreUnavailableError,
)
from corvid_actors.events import (
    ApprovalRequestEvent,
    ApprovalResolved,
    Assistant,
    ContentBlockDelta,
    ContentBlockStart,
    ContextUsage,
    ContextWarning,
    CreditsLow,
    ErrorEvent,
    Event,
    MessageStop,
    PlanEvent,
    QueueStatus,
    Result,
    RetryScheduled,
    SessionError,
    SessionExited,
    SessionPaused,
    SessionRestarting,
    SessionResumed,
    SessionStarted,
    SessionStopped,
    SystemEvent,
    Thinking,
    ToolStatus,
)

if TYPE_CHECKING:
    from corvid_actors.aio import AsyncRuntime
    from corvid_actors.config import Config, load_config
    from corvid_actors.providers.anthropic import AnthropicProvider
    from corvid_actors.providers.base import (
        ChatMessage,
        ErrorKind,
        ModelInfo,
        ModelRequest,
        ModelResponse,
        Provider,
        ProviderError,
        ProviderTraits,
        ToolCall,
        Usage,
    )
    from corvid_actors.providers.ollama import OllamaProvider
    from corvid_actors.runtime import Runtime
    from corvid_actors.tools.base import Tool, ToolContext, ToolError, ToolRegistry

logger.disable("corvid_actors")

__all__ = [
    # the runtime and its configuration
    "Runtime", "AsyncRuntime", "Config", "load_config",
    # events
    "Event", "SessionStarted", "SessionExited", "SessionStopped", "SessionPaused",
    "SessionResumed", "SessionRestarting", "ErrorEvent", "SessionError", "Thinking",
    "ContentBlockDelta", "ContentBlockStart", "MessageStop", "Assistant", "ToolStatus", "Result",
    "ApprovalRequestEvent", "ApprovalResolved", "QueueStatus", "ContextUsage", "ContextWarning",
    "RetryScheduled", "SystemEvent", "CreditsLow", "PlanEvent",
    # errors
    "CorvidError", "ConfigError", "StoreError", "StoreUnavailableError", "NotFoundError",
    "RuntimeStoppedError", "ConflictError", "SettleTimeout", "InvalidContentError",
    "CreditAmountError", "AdminError", "ProviderError", "ErrorKind", "ToolError",
    # tools, permissions and approvals
    "Tool", "ToolContext", "ToolRegistry", "ToolSpec", "ToolResult", "ToolKind", "Permission",
    "PermissionDecision", "ApprovalPolicy", "Review", "CancelToken", "StreamCancelled",
    # providers
    "Provider", "ProviderTraits", "ModelRequest", "ModelResponse", "ChatMessage", "ToolCall", "Usage", "ModelInfo",
    "OllamaProvider", "AnthropicProvider",
]

#: public name -> the module defining it, imported on first use (PEP 562)
_LAZY = {
    "Runtime": "corvid_actors.runtime",
    "AsyncRuntime": "corvid_actors.aio",
    "OllamaProvider": "corvid_actors.providers.ollama",
    "AnthropicProvider": "corvid_actors.providers.anthropic",
    # the configuration, providers' and tools' vocabulary: light, but not needed by every
    # command line (``corvid-actors --help`` loads no more than it shows)
    "Config": "corvid_actors.config", "load_config": "corvid_actors.config",
    **dict.fromkeys(("ChatMessage", "ErrorKind", "ModelInfo", "ModelRequest", "ModelResponse", "Provider",
                     "ProviderError", "ProviderTraits", "ToolCall", "Usage"), "corvid_actors.providers.base"),
    **dict.fromkeys(("Tool", "ToolContext", "ToolError", "ToolRegistry"), "corvid_actors.tools.base"),
}


def _public(value: Any) -> Any:
    """Report the package as ``value``'s module (classes and functions; not aliases).

    A class's own string annotations (``from __future__ import annotations``) are resolved
    first, in the module that defines them: ``typing.get_type_hints`` looks names up in
    ``__module__``'s namespace, which after the rewrite would be this package's.
    """
    if isinstance(value, type):
        own = value.__dict__.get("__annotations__")
        if own:
            hints = typing.get_type_hints(value, include_extras=True)
            value.__annotations__ = {key: hints[key] for key in own}
        value.__module__ = __name__
    elif isinstance(value, types.FunctionType):
        value.__module__ = __name__
    return value


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = _public(getattr(importlib.import_module(module), name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


for _name in __all__:
    if _name not in _LAZY:
        _public(globals()[_name])
del _name
