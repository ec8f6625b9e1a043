"""The runtime's side of the corvid_* tools: :class:`RuntimeSessionControl` and the tools hook.

The tool layer declares what its runtime tools may ask
(:class:`~corvid_actors.tools.session_control.SessionControl`); this module implements it
over one :class:`~corvid_actors.runtime.Runtime`'s public API (publishing alone goes to
its event bus through ``runtime.internals``: this module is the runtime's own side), and
:func:`session_tools_hook` composes the ``extra_tools`` hook the Runtime hands its
:class:`~corvid_actors.wiring.builder.SessionBuilder`: a host's own hook, the corvid_* tools, and
the agent's external MCP servers — in that order (later names win).

The control is made before the Runtime's actors start (the builder needs the hook) and
reaches them only when a tool runs, on a session's worker thread. What it uses of the
Runtime is named by :class:`ControlledRuntime` (the Runtime is one): this module does not
import :mod:`corvid_actors.runtime`, which imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from corvid_actors.actors.base import tell
from corvid_actors.actors.events import EventCallback, Publish
from corvid_actors.clock import Cancellable, Clock
from corvid_actors.config import Config
from corvid_actors.content import UserContent
from corvid_actors.events import Event
from corvid_actors.runtime.tree import RuntimeInternals
from corvid_actors.tools.base import ToolRegistry
from corvid_actors.tools.corvid_tools import CorvidTools
from corvid_actors.tools.mcp_client import McpToolSource, SessionTools
from corvid_actors.tools.session_control import (
    AgentInfo,
    CreditBalance,
    SessionListener,
    SessionTimeout,
)

#: the ``extra_tools`` hook's type: a session's stored context in, the tools it adds out
ToolsHook = Callable[[Any], ToolRegistry]


def _agent_info(row: Any) -> AgentInfo:
    return AgentInfo(id=str(row.id), name=str(row.name), description=str(row.description or ""),
                     default_project_id=row.default_project_id)


class ControlledRuntime(Protocol):
    """The part of :class:`~corvid_actors.runtime.Runtime` a :class:`RuntimeSessionControl`
    uses (the Runtime's methods of the same names; see there)."""

    @property
    def config(self) -> Config:
        """The runtime's configuration."""
        ...

    @property
    def clock(self) -> Clock:
        """The runtime's clock."""
        ...

    @property
    def internals(self) -> RuntimeInternals:
        """The actors behind the facade (the control publishes on its event bus)."""
        ...

    @property
    def credits_enabled(self) -> bool:
        """Whether the credit bank runs."""
        ...

    def agents(self) -> list[Any]:
        """Every stored agent."""
        ...

    def agent(self, id_or_name: str) -> Any | None:
        """The stored agent of that id or name, or None."""
        ...

    def find_session(self, *, source: str, channel: str, agent_id: str | None = None, name: str | None = None,
                     participant: str | None = None) -> str | None:
        """The id of the newest stored session with these fields, or None."""
        ...

    def create_session(self, **fields: Any) -> Any:
        """Create a session row."""
        ...

    def resume_process(self, session_id: str, prompt: UserContent | None = None) -> int | None:
        """Resume a session with its history; its pid, or None."""
        ...

    def subscribe(self, session_id: str, callback: EventCallback) -> None:
        """``callback(session_id, event)`` for this session's events."""
        ...

    def unsubscribe(self, session_id: str, callback: EventCallback) -> None:
        """Remove a callback given to :meth:`subscribe`."""
        ...

    def extend_timeout(self, session_id: str, additional_s: float) -> bool:
        """Add ``additional_s`` to a running session's timeout."""
        ...

    def session_info(self, session_id: str | None = None) -> dict[str, Any]:
        """In-memory facts per session."""
        ...

    def credit_balance(self, participant: str) -> int:
        """The participant's credit balance."""
        ...


class RuntimeSessionControl:
    """:class:`~corvid_actors.tools.session_control.SessionControl` over a Runtime."""

    def __init__(self, runtime: ControlledRuntime) -> None:
        self._runtime = runtime

    def list_agents(self) -> list[AgentInfo]:
        return [_agent_info(row) for row in self._runtime.agents()]

    def find_agent(self, id_or_name: str) -> AgentInfo | None:
        row = self._runtime.agent(id_or_name)
        return _agent_info(row) if row is not None else None

    def find_session(self, agent_id: str, source: str, channel: str) -> str | None:
        return self._runtime.find_session(agent_id=agent_id, source=source, channel=channel)

    def create_session(self, **fields: Any) -> str:
        return str(self._runtime.create_session(**fields).id)

    def resume(self, session_id: str, prompt: str) -> bool:
        return self._runtime.resume_process(session_id, prompt) is not None

    def subscribe(self, session_id: str, listener: SessionListener) -> None:
        self._runtime.subscribe(session_id, listener)

    def unsubscribe(self, session_id: str, listener: SessionListener) -> None:
        self._runtime.unsubscribe(session_id, listener)

    def publish(self, session_id: str, event: Event) -> None:
        # the runtime's own side: it publishes on the runtime's bus (runtime_tree's internals)
        tell(self._runtime.internals.bus, Publish(session_id, event))

    def wait(self, delay_s: float, cancel: Cancellable | None = None) -> bool:
        return self._runtime.clock.wait(delay_s, cancel)

    def extend_timeout(self, session_id: str, additional_s: float) -> SessionTimeout | None:
        runtime = self._runtime
        if not runtime.extend_timeout(session_id, additional_s):
            return None
        facts = runtime.session_info(session_id).get(session_id, {})
        supervisor = runtime.config.supervisor
        return SessionTimeout(
            timeout_s=float(facts.get("timeout_s") or 0.0), default_s=supervisor.session_timeout_s,
            cap_s=supervisor.session_timeout_s * supervisor.timeout_extension_cap_factor,
        )

    def credits_enabled(self) -> bool:
        return self._runtime.credits_enabled

    def credit_balance(self, participant: str) -> CreditBalance:
        credits = self._runtime.config.credits
        return CreditBalance(balance=self._runtime.credit_balance(participant),
                             credits_per_turn=credits.credits_per_turn,
                             low_threshold=credits.low_credit_threshold)


def session_tools_hook(control: RuntimeSessionControl, config: Config, store: Any,
                       host_hook: ToolsHook | None = None) -> Callable[[Any], SessionTools]:
    """The ``extra_tools`` hook offering a host's own tools (``host_hook``), the corvid_*
    tools over ``control``, and the agent's MCP servers (from ``config`` and ``store``)."""
    corvid = CorvidTools(control, config.corvid_tools)
    mcp = McpToolSource(config.mcp, store, publish=control.publish,
                        output_limit=config.tools.output_truncate_chars)

    def hook(ctx: Any) -> SessionTools:
        tools = SessionTools()
        if host_hook is not None:
            tools.merge(host_hook(ctx))
        tools.merge(corvid(ctx))
        tools.merge(mcp(ctx))
        return tools

    return hook
