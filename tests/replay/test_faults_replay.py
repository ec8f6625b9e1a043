"""The journal's faults and answers, replayed (issue 40 items 1–2): an actor crash (not
the model's) and its restart, the failed health probes of an outage, a tool's duration,
who answered an approval — each recorded in simulation, then replayed with the same
events at the same simulated times."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from corvid_actors.core.vocabulary import ToolKind, ToolResult, ToolSpec
from corvid_actors.testing import ScriptedProvider, SimClock, Turn, kill_incarnation, sim_runtime
from corvid_actors.testing.replay import Recording, ReplayDivergence, load_recording, replay
from corvid_actors.tools.base import Tool, ToolRegistry

JOURNAL_ON = {"journal": {"enabled": True}}
#: the slow tool's run, in simulated seconds
TOOL_S = 2.5


def _slow_tool(clock: SimClock) -> ToolRegistry:
    def handler(arguments: dict[str, Any], context: Any) -> ToolResult:
        clock.wait(TOOL_S, context.cancel)
        return ToolResult(f"built {arguments.get('target')}")

    return ToolRegistry([Tool(ToolSpec("build", "build a target", {"type": "object", "properties": {
        "target": {"type": "string"}}}), ToolKind.COMMAND, handler)])


def _record_crash() -> Recording:
    """A build tool call a chat user approves after 3 s (2.5 s of running), a slow reply
    whose actor crashes mid-call at 9 s (a bug, not the model), the restart after its 5 s
    backoff, a reply."""
    clock = SimClock()
    provider = ScriptedProvider(clock)
    tools = _slow_tool(clock)
    runtime = sim_runtime(clock, provider, config=JOURNAL_ON, loop_for_provider={"scripted": "direct"},
                          tool_registry_factory=lambda: tools, runtime_tools=False)
    try:
        row = runtime.create_agent("builder", permission_mode="default")
        session = runtime.create_session(agent_id=row.id, source="chat")
        provider.for_session(session.id, Turn.tool_call("build", {"target": "docs"}, latency_s=1),
                             Turn.reply("never finished", latency_s=10), Turn.reply("back again", latency_s=1))

        def approve_later(sid: str, event: Any) -> None:
            if event.type == "approval_request":
                clock.call_later(3.0, lambda: runtime.resolve_approval(event.id, "allow", "go",
                                                                       answered_by="chat:alice"))

        runtime.subscribe_all(approve_later)
        runtime.start_process(session.id, "build the docs")
        clock.advance_to(9.0)
        assert kill_incarnation(runtime, session.id)
        runtime.settle()
        clock.advance(60)
        return load_recording(runtime, session.id)
    finally:
        runtime.shutdown()
        clock.close()


@pytest.fixture(scope="module")
def crashed() -> Recording:
    return _record_crash()


def test_an_actor_crash_is_journaled_after_the_call_it_cancelled(crashed):
    [(step, crash)] = crashed.crashes
    assert crash["t"] == 9.0 and "InjectedCrashError" in crash["error"] and crash["generation"] == 1
    model_1, tool, cut = crashed.steps[:3]
    assert step == 3 and cut["kind"] == "model" and cut.get("cancelled") is True  # the reply in flight
    assert (cut["requested_at"], cut["ended_at"]) == (6.5, 9.0)
    assert tool["duration_s"] == TOOL_S and tool["output"] == "built docs"


def test_an_approval_journals_and_shows_who_answered(crashed):
    [approval] = crashed.of("approval")
    assert (approval["answered_by"], approval["allowed"], approval["t"]) == ("chat:alice", True, 4.0)
    [resolved] = [fields for kind, _t, fields in crashed.events if kind == "approval_resolved"]
    assert resolved["answered_by"] == "chat:alice"


def test_the_crash_replays_at_its_time_and_the_restart_follows(crashed):
    result = replay(crashed, time_tolerance_s=0.0)  # compares every event, its fields and its time
    assert result.events == crashed.events
    times = {kind: t for kind, t, _fields in result.events if kind in ("session_restarting", "approval_resolved")}
    assert times == {"session_restarting": 9.0, "approval_resolved": 4.0}
    assert [t for kind, t, _ in result.events if kind == "session_started"] == [0.0, 14.0]  # 5 s backoff
    completed = [(t, f) for kind, t, f in result.events if kind == "tool_status" and f["state"] == "completed"]
    assert [t for t, _ in completed] == [4.0 + TOOL_S]  # the tool's recorded duration, in simulated time
    [resolved] = [e for _t, e in result.raw if e.type == "approval_resolved"]
    assert resolved.answered_by == "chat:alice"  # the replay answered as the recorded answerer


def test_a_crash_the_session_reaches_by_another_step_is_a_divergence(crashed):
    edited = Recording.from_dict(copy.deepcopy(crashed.to_dict()))
    edited.of("tool")[0]["duration_s"] = 30.0  # the tool now runs past the crash's time
    with pytest.raises(ReplayDivergence, match="an actor crash after step 3") as caught:
        replay(edited)
    assert caught.value.step == 3 and "the crash after step 2" in caught.value.asked


def _record_outage(health: list[bool]) -> Recording:
    clock = SimClock()
    provider = ScriptedProvider(clock)
    provider.health_results = list(health)
    config = {**JOURNAL_ON, "direct_loop": {"api_failure_threshold": 1},
              "supervisor": {"auto_resume_base_s": 60.0, "auto_resume_check_interval_s": 30.0}}
    runtime = sim_runtime(clock, provider, config=config, loop_for_provider={"scripted": "direct"})
    try:
        row = runtime.create_agent("bot")
        session = runtime.create_session(agent_id=row.id, source="chat")
        provider.for_session(session.id, Turn.outage(latency_s=1), Turn.reply("up again", latency_s=1))
        runtime.start_process(session.id, "hello")
        clock.advance(600)
        return load_recording(runtime, session.id)
    finally:
        runtime.shutdown()
        clock.close()


def test_failed_probes_replay_so_the_outage_lasts_as_recorded():
    recording = _record_outage([False, False, True])
    assert [(p["t"], p["healthy"]) for p in recording.of("probe")] == [(61.0, False), (91.0, False), (121.0, True)]
    [resumed] = [t for kind, t, _ in recording.events if kind == "session_resumed"]
    assert resumed == 121.0  # paused at 1 s, due at 61 s, two failed probes 30 s apart
    result = replay(recording, time_tolerance_s=0.0)
    assert result.events == recording.events
    assert [t for kind, t, _ in result.events if kind == "session_resumed"] == [121.0]
