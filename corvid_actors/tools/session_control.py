"""What the corvid_* tools may ask of the runtime: the :class:`SessionControl` protocol.

The runtime's own tools (:mod:`corvid_actors.tools.corvid_tools`) act beyond their
session — they message another agent's session and wait for its reply, extend their
session's timeout, read a credit balance. They do it through this narrow protocol, which
the runtime layer implements (``corvid_actors.runtime.session_control.RuntimeSessionControl``),
so the tool layer imports no actor and holds no ``Runtime``: a test can hand the tools a
fake control as httpx tests hand a client a ``MockTransport``.

Every method is called on a session's worker thread (never an actor thread), may block,
and raises a :class:`~corvid_actors.errors.CorvidError` when the runtime cannot answer
(shut down, an unknown row); the tools turn that into an error result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from corvid_actors.clock import Cancellable
from corvid_actors.events import Event

#: ``callback(session_id, event)`` for a session's events (runs on the event bus thread)
SessionListener = Callable[[str, Event], None]


@dataclass(frozen=True)
class AgentInfo:
    """What the tools know of an agent."""

    id: str
    name: str
    description: str = ""
    #: where a session of this agent works unless the sender shares its project
    default_project_id: str | None = None


@dataclass(frozen=True)
class SessionTimeout:
    """A running session's inactivity timeout after an extension."""

    #: seconds from now until the session stops unless it is active again
    timeout_s: float
    #: the configured default, which the session's next activity restores
    default_s: float
    #: the most an extension can give (the supervisor's cap)
    cap_s: float


@dataclass(frozen=True)
class CreditBalance:
    """A participant's balance, with the numbers that give it meaning."""

    balance: int
    credits_per_turn: int
    #: below this the balance is low
    low_threshold: int


class SessionControl(Protocol):
    """The runtime as the corvid_* tools see it (see the module docstring)."""

    def list_agents(self) -> Sequence[AgentInfo]:
        """Every registered agent."""
        ...

    def find_agent(self, id_or_name: str) -> AgentInfo | None:
        """The agent with this id, or this name (case-insensitive); None if there is none."""
        ...

    def find_session(self, agent_id: str, source: str, channel: str) -> str | None:
        """The id of ``agent_id``'s session with this ``source`` and ``channel``, if any."""
        ...

    def create_session(self, **fields: Any) -> str:
        """Create a session row (``agent_id``, ``project_id``, ``source``, ``name``,
        ``participant``, ``channel``, ``depth``) and return its id; it does not start."""
        ...

    def resume(self, session_id: str, prompt: str) -> bool:
        """Start or resume the session with ``prompt`` (or send it to the running one);
        False when it could not start (an ``error`` event says why)."""
        ...

    def subscribe(self, session_id: str, listener: SessionListener) -> None:
        """Hear the session's events from now on."""
        ...

    def unsubscribe(self, session_id: str, listener: SessionListener) -> None:
        ...

    def publish(self, session_id: str, event: Event) -> None:
        """Publish ``event`` as the session's (e.g. an MCP server lost mid-session)."""
        ...

    def wait(self, delay_s: float, cancel: Cancellable | None = None) -> bool:
        """Block for ``delay_s`` on the runtime's clock (simulated time in simulations);
        False if ``cancel`` fired first."""
        ...

    def extend_timeout(self, session_id: str, additional_s: float) -> SessionTimeout | None:
        """Give the running session ``additional_s`` more before its timeout (capped);
        None when it is not running."""
        ...

    def credits_enabled(self) -> bool:
        """Whether the runtime keeps credits (a credit bank runs)."""
        ...

    def credit_balance(self, participant: str) -> CreditBalance:
        """The participant's balance (0 without an account); only when credits are enabled."""
        ...
