"""A journaled session recorded in simulation, for the replay tests: one tool call a human
approves after 3 s, a streamed reply, a second message, a fatal error (restart after 5 s),
and a reply after the restart."""

from __future__ import annotations

from typing import Any

from corvid_actors.testing import ScriptedProvider, SimClock, Turn, sim_runtime
from corvid_actors.testing.replay import Recording, load_recording

JOURNAL_ON = {"journal": {"enabled": True}}


def record_session(*, config: dict[str, Any] | None = None, agent: str = "bot", store: Any = None,
                   turns: tuple[Any, ...] | None = None) -> tuple[Recording, dict[str, Any]]:
    """Run the scenario on a journaled sim runtime; its recording and facts about the run."""
    clock = SimClock()
    provider = ScriptedProvider(clock)
    extra = {"store": store} if store is not None else {}
    runtime = sim_runtime(clock, provider, config=config or JOURNAL_ON, loop_for_provider={"scripted": "direct"},
                          **extra)
    try:
        row = runtime.create_agent(agent, permission_mode="default")
        session = runtime.create_session(agent_id=row.id, source="chat")
        provider.for_session(session.id, *(turns or (
            Turn.tool_call("list_files", {"path": "."}, latency_s=1),
            Turn.reply("Done here, token=abc123.", deltas=3, latency_s=2, delta_interval_s=0.5),
            Turn.crash("boom"),
            Turn.reply("back again", latency_s=1))))

        def approve_later(sid: str, event: Any) -> None:
            if event.type == "approval_request":
                clock.call_later(3.0, lambda: runtime.resolve_approval(event.id, "allow", "fine"))

        runtime.subscribe_all(approve_later)
        runtime.start_process(session.id, "list please")
        clock.advance(30)
        runtime.send_message(session.id, "again")
        clock.advance(60)
        journal = runtime.internals.journal
        recording = load_recording(runtime, session.id)
        facts = {"session_id": session.id, "requests": len(provider.requests_for(session.id)),
                 "journal": journal, "bytes": journal.entries.size(session.id) if journal is not None else 0}
        return recording, facts
    finally:
        runtime.shutdown()
        clock.close()
