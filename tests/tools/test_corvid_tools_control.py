"""The corvid_* tools over a fake SessionControl: no runtime, no actors — the protocol is the
tools' whole view of the runtime (as an httpx client sees only its transport)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corvid_actors.config import CorvidToolsConfig
from corvid_actors.core.vocabulary import CancelToken
from corvid_actors.errors import RuntimeStoppedError
from corvid_actors.events import Assistant, Event, Result
from corvid_actors.tools.base import ToolContext
from corvid_actors.tools.corvid_tools import (
    AGENT_SOURCE,
    CorvidTools,
    agent_channel,
    sender_session_id,
)
from corvid_actors.tools.session_control import (
    AgentInfo,
    CreditBalance,
    SessionControl,
    SessionListener,
    SessionTimeout,
)

ALICE = AgentInfo("a1", "alice", "writes code", default_project_id="p-alice")
BOB = AgentInfo("b1", "bob", "reviews", default_project_id=None)


@dataclass
class FakeControl:
    """A SessionControl whose sessions answer at once with a scripted reply."""

    agents: list[AgentInfo] = field(default_factory=lambda: [ALICE, BOB])
    reply: str | None = "looks good"
    credits: int | None = None
    running: bool = True
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    listeners: dict[str, list[SessionListener]] = field(default_factory=dict)
    prompts: list[tuple[str, str]] = field(default_factory=list)
    waited: list[float] = field(default_factory=list)
    fail_with: Exception | None = None

    def list_agents(self) -> Sequence[AgentInfo]:
        if self.fail_with is not None:
            raise self.fail_with
        return self.agents

    def find_agent(self, id_or_name: str) -> AgentInfo | None:
        return next((a for a in self.agents if id_or_name in (a.id, a.name)), None)

    def find_session(self, agent_id: str, source: str, channel: str) -> str | None:
        return next((sid for sid, row in self.sessions.items()
                     if (row["agent_id"], row["source"], row["channel"]) == (agent_id, source, channel)), None)

    def create_session(self, **fields: Any) -> str:
        sid = f"s{len(self.sessions) + 1}"
        self.sessions[sid] = fields
        return sid

    def resume(self, session_id: str, prompt: str) -> bool:
        self.prompts.append((session_id, prompt))
        if self.reply is not None:
            for listener in list(self.listeners.get(session_id, ())):
                listener(session_id, Assistant(content=self.reply))
                listener(session_id, Result(subtype="success", result=self.reply))
        return True

    def subscribe(self, session_id: str, listener: SessionListener) -> None:
        self.listeners.setdefault(session_id, []).append(listener)

    def unsubscribe(self, session_id: str, listener: SessionListener) -> None:
        self.listeners[session_id].remove(listener)

    def publish(self, session_id: str, event: Event) -> None:
        pass

    def wait(self, delay_s: float, cancel: Any = None) -> bool:
        self.waited.append(delay_s)
        return not (cancel is not None and cancel.cancelled)

    def extend_timeout(self, session_id: str, additional_s: float) -> SessionTimeout | None:
        if not self.running:
            return None
        return SessionTimeout(timeout_s=min(additional_s, 7200.0), default_s=1800.0, cap_s=7200.0)

    def credits_enabled(self) -> bool:
        return self.credits is not None

    def credit_balance(self, participant: str) -> CreditBalance:
        assert self.credits is not None
        return CreditBalance(self.credits, credits_per_turn=1, low_threshold=5)


@dataclass
class Row:
    id: str
    name: str = ""
    depth: int = 1
    project_id: str | None = None
    participant: str = ""


@dataclass
class Ctx:
    session: Row
    agent: Any = None


def call(control: FakeControl, name: str, args: dict[str, Any], *, session: Row | None = None,
         agent: Any = ALICE, cancel: CancelToken | None = None) -> Any:
    ctx = Ctx(session or Row("me"), agent)
    control_as_protocol: SessionControl = control  # the fake satisfies the protocol (mypy)
    tool = CorvidTools(control_as_protocol, CorvidToolsConfig()).__call__(ctx).get(name)
    assert tool is not None
    return tool.handler(args, ToolContext(project_dir=Path("."), cancel=cancel or CancelToken()))


def test_list_agents_marks_the_caller():
    out = call(FakeControl(), "corvid_list_agents", {}).output
    assert out.splitlines() == ["- alice (id a1) [you]: writes code", "- bob (id b1): reviews"]
    assert call(FakeControl(agents=[]), "corvid_list_agents", {}).output == "No agents are registered."


def test_send_message_creates_one_recipient_session_per_channel_and_returns_the_reply():
    control = FakeControl()
    result = call(control, "corvid_send_message", {"to_agent": "bob", "message": "review this"})
    assert not result.is_error and result.output == "Reply from bob:\nlooks good"
    (sid, row), = control.sessions.items()
    assert row == {"agent_id": "b1", "project_id": None, "source": AGENT_SOURCE, "name": "Message from alice",
                   "participant": "a1", "channel": "agent:me", "depth": 2}
    assert control.prompts[0][0] == sid and control.prompts[0][1].endswith("review this")
    call(control, "corvid_send_message", {"to_agent": "b1", "message": "again"})
    assert len(control.sessions) == 1 and control.prompts[1][0] == sid  # the same session, resumed
    assert control.listeners[sid] == []  # unsubscribed after each reply
    assert control.waited == [CorvidToolsConfig().agent_reply_timeout_s] * 2


def test_a_shared_project_and_a_thread_make_their_own_channel():
    control = FakeControl()
    call(control, "corvid_send_message", {"to_agent": "alice", "message": "hi", "thread": "t",
                                          "share_project": True},
         session=Row("me", project_id="p-me"), agent=BOB)
    (row,) = control.sessions.values()
    assert (row["channel"], row["project_id"]) == (agent_channel("me", "t", shared=True), "p-me")
    assert row["channel"] == "agent:me#t+shared"
    assert sender_session_id(Row("x")) is None


def test_send_message_refusals():
    control = FakeControl()
    assert "yourself" in call(control, "corvid_send_message", {"to_agent": "alice", "message": "x"}).output
    missing = call(control, "corvid_send_message", {"to_agent": "carol", "message": "x"})
    assert missing.is_error and "Agents: alice, bob" in missing.output
    deep = call(control, "corvid_send_message", {"to_agent": "bob", "message": "x"}, session=Row("me", depth=4))
    assert deep.is_error and "3 agent messages deep" in deep.output
    assert control.sessions == {}


def test_no_reply_is_an_error_saying_how_long_it_waited():
    result = call(FakeControl(reply=None), "corvid_send_message", {"to_agent": "bob", "message": "x"})
    assert result.is_error and result.output == "bob did not reply within 600s."


def test_extend_timeout_reports_the_new_timeout_and_the_cap():
    control = FakeControl()
    assert call(control, "corvid_extend_timeout", {"minutes": 30}).output.startswith(
        "Timeout extended: this session now stops in 30 minutes unless it is active again")
    assert "(the maximum)" in call(control, "corvid_extend_timeout", {"minutes": 120}).output
    assert call(control, "corvid_extend_timeout", {"minutes": 0}).is_error
    assert "not running" in call(FakeControl(running=False), "corvid_extend_timeout", {"minutes": 5}).output


def test_check_credits():
    assert "not enabled" in call(FakeControl(), "corvid_check_credits", {}).output
    assert call(FakeControl(credits=3), "corvid_check_credits", {}).is_error  # no participant
    out = call(FakeControl(credits=3), "corvid_check_credits", {"wallet_address": "w"}).output
    assert out == "w has 3 credits (1 per turn). This is low."


def test_a_runtime_error_is_an_error_result_not_a_crash():
    result = call(FakeControl(fail_with=RuntimeStoppedError("the runtime is shut down")), "corvid_list_agents", {})
    assert result.is_error and result.output == "RuntimeStoppedError: the runtime is shut down"
