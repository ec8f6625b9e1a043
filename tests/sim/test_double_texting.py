"""Double texting (issue 35 item 6): a user message that arrives while the session is still
answering the previous one is queued (``enqueue``), ends the running turn at its next safe
point (``interrupt``) or is refused (``reject``), as the agent's ``double_texting`` says.

Every scenario: the first reply streams slowly — three chunks of eight characters at
t = 1, 2 and 3 s (``delta_interval_s``) — and the second message comes at t = 2.5 s,
between the second and the third chunk.
"""

from __future__ import annotations

import pytest

from corvid_actors.chat import BridgeSettings, ChatBridge, MemoryTransport
from corvid_actors.core.vocabulary import ToolResult, ToolSpec
from corvid_actors.errors import SessionBusyError
from corvid_actors.loop.turn import APPROVAL_WITHDRAWN, INTERRUPTED_MARKER, NOT_RUN_INTERRUPTED
from corvid_actors.testing import EventRecorder, Turn, sim_runtime
from corvid_actors.tools.base import Tool, ToolContext, ToolKind, ToolRegistry

FIRST = "Paris is large, and old."  # streamed as "Paris is" | " large, " | "and old."
SLOW = Turn.reply(FIRST, deltas=3, latency_s=1, delta_interval_s=1)
CUT = f"Paris is large,\n\n{INTERRUPTED_MARKER}"  # what was streamed by 2.5 s, marked


def start_slow_turn(rt, scripted, policy, *, second="Lyon, then."):
    agent = rt.create_agent(f"helper-{policy}", double_texting=policy)
    s = rt.create_session(agent_id=agent.id, source="web")
    scripted.for_session(s.id, SLOW, Turn.reply(second, latency_s=1))
    rt.start_process(s.id, "Tell me about Paris.")
    rt.settle()
    rt.clock.advance(2.5)
    return s


def conversation(rt, sid):
    return [(m.role, m.content) for m in rt.internals.store.messages(sid)]


def turns(recorder, sid):
    """(time, what) of each reply and result."""
    return [(r.at, r.type, getattr(r.event, "subtype", "") or r.event.content)  # type: ignore[attr-defined]
            for r in recorder.of(sid) if r.type in ("assistant", "result")]


# --- through the runtime ---------------------------------------------------------------------


def test_enqueue_answers_the_second_message_after_the_first_reply(runtime, scripted, recorder):
    s = start_slow_turn(runtime, scripted, "enqueue")
    assert runtime.send_message(s.id, "Actually, Lyon.") is True
    runtime.clock.advance(10)
    assert turns(recorder, s.id) == [
        (3.0, "assistant", FIRST), (3.0, "result", "success"),
        (4.0, "assistant", "Lyon, then."), (4.0, "result", "success"),
    ]
    second = scripted.requests_for(s.id)[1]
    assert [(m.role, m.content) for m in second.messages] == [
        ("user", "Tell me about Paris."), ("assistant", FIRST), ("user", "Actually, Lyon.")]


def test_interrupt_cuts_the_stream_keeps_the_partial_reply_marked_and_answers_with_both_in_view(
        runtime, scripted, recorder):
    s = start_slow_turn(runtime, scripted, "interrupt")
    assert runtime.send_message(s.id, "Actually, Lyon.") is True
    runtime.settle()
    runtime.clock.advance(10)
    assert turns(recorder, s.id) == [
        (2.5, "assistant", CUT), (2.5, "result", "interrupted"),
        (3.5, "assistant", "Lyon, then."), (3.5, "result", "success"),
    ]
    assert recorder.of(s.id, "assistant")[0].event.interrupted is True  # type: ignore[attr-defined]
    # the cut stream sends nothing more: its third chunk (due at 3 s) never comes
    assert [(r.at, r.event.text) for r in recorder.of(s.id, "content_block_delta")] == [  # type: ignore[attr-defined]
        (1.0, "Paris is"), (2.0, " large, "), (3.5, "Lyon, then.")]
    second = scripted.requests_for(s.id)[1]
    assert [(m.role, m.content) for m in second.messages] == [
        ("user", "Tell me about Paris."), ("assistant", CUT), ("user", "Actually, Lyon.")]
    # stored in the order things happened: the message (stored by send_message, its
    # acknowledgement), then the cut reply (stored when the turn ended, at once after)
    assert conversation(runtime, s.id) == [
        ("user", "Tell me about Paris."), ("user", "Actually, Lyon."), ("assistant", CUT),
        ("assistant", "Lyon, then.")]
    row = runtime.internals.store.get_session(s.id)
    assert (row.open_turns, row.cumulative_turns) == (0, 2)  # the interrupted turn is closed


def test_a_resumed_session_reads_the_cut_reply_where_it_was_said(runtime, scripted):
    s = start_slow_turn(runtime, scripted, "interrupt")
    runtime.send_message(s.id, "Actually, Lyon.")
    runtime.settle()
    runtime.clock.advance(10)
    runtime.stop_process(s.id)
    runtime.settle()
    runtime.resume_process(s.id, "And Nice?")
    runtime.settle()
    prompt = scripted.requests_for(s.id)[-1].messages[-1].content
    transcript = prompt[prompt.index("[User]: Tell me about Paris."):prompt.index("</conversation_history>")]
    assert transcript.splitlines() == [
        "[User]: Tell me about Paris.", "[Assistant]: Paris is large,", "", INTERRUPTED_MARKER,
        "[User]: Actually, Lyon.", "[Assistant]: Lyon, then."]


@pytest.mark.parametrize("loop", ["direct", "sdk"])
def test_interrupt_cuts_the_stream_in_the_agentic_loops_too(sim_clock, scripted, tmp_path, loop):
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws", loop_for_provider={"scripted": loop})
    try:
        recorder = EventRecorder.attach(rt)
        s = start_slow_turn(rt, scripted, "interrupt")
        rt.send_message(s.id, "Actually, Lyon.")
        rt.settle()
        sim_clock.advance(10)
        assert turns(recorder, s.id) == [
            (2.5, "assistant", CUT), (2.5, "result", "interrupted"),
            (3.5, "assistant", "Lyon, then."), (3.5, "result", "success"),
        ]
        second = scripted.requests_for(s.id)[1]
        assert [(m.role, m.content) for m in second.messages][-3:] == [
            ("user", "Tell me about Paris."), ("assistant", CUT), ("user", "Actually, Lyon.")]
    finally:
        rt.shutdown()


def test_interrupt_with_nothing_streamed_yet_keeps_the_marker_alone(runtime, scripted, recorder):
    agent = runtime.create_agent("helper", double_texting="interrupt")
    s = runtime.create_session(agent_id=agent.id, source="web")
    scripted.for_session(s.id, Turn.reply("too late", latency_s=60), Turn.reply("Lyon, then."))
    runtime.start_process(s.id, "Tell me about Paris.")
    runtime.settle()
    runtime.clock.advance(5)
    runtime.send_message(s.id, "Never mind: Lyon.")
    runtime.settle()
    runtime.clock.advance(120)
    assert turns(recorder, s.id) == [
        (5.0, "assistant", INTERRUPTED_MARKER), (5.0, "result", "interrupted"),
        (5.0, "assistant", "Lyon, then."), (5.0, "result", "success"),
    ]


def test_reject_refuses_the_second_message_without_storing_it(runtime, scripted, recorder):
    s = start_slow_turn(runtime, scripted, "reject")
    with pytest.raises(SessionBusyError, match="still answering"):
        runtime.send_message(s.id, "Actually, Lyon.")
    runtime.clock.advance(0.5)
    assert turns(recorder, s.id) == [(3.0, "assistant", FIRST), (3.0, "result", "success")]
    assert conversation(runtime, s.id) == [("user", "Tell me about Paris."), ("assistant", FIRST)]
    # once answered, the session takes messages again
    assert runtime.send_message(s.id, "And Lyon?") is True
    runtime.clock.advance(1)
    assert turns(recorder, s.id)[-2:] == [(4.0, "assistant", "Lyon, then."), (4.0, "result", "success")]


def test_the_config_default_applies_to_agents_that_leave_it_unset(sim_clock, scripted, tmp_path):
    rt = sim_runtime(sim_clock, scripted, config={"agents": {"double_texting": "interrupt"}},
                     workspace_dir=tmp_path / "ws")
    try:
        recorder = EventRecorder.attach(rt)
        agent = rt.create_agent("helper")  # double_texting unset: the config's
        s = rt.create_session(agent_id=agent.id, source="web")
        scripted.for_session(s.id, SLOW, Turn.reply("Lyon, then."))
        rt.start_process(s.id, "Tell me about Paris.")
        rt.settle()
        sim_clock.advance(2.5)
        rt.send_message(s.id, "Actually, Lyon.")
        rt.settle()
        assert turns(recorder, s.id)[:2] == [(2.5, "assistant", CUT), (2.5, "result", "interrupted")]
    finally:
        rt.shutdown()


# --- a running tool is never cut -------------------------------------------------------------


def test_interrupt_lets_a_running_tool_finish_and_skips_the_calls_after_it(sim_clock, scripted, tmp_path):
    ran: list[tuple[float, str, bool]] = []

    def slow_lookup(args: dict, ctx: ToolContext) -> ToolResult:
        ran.append((sim_clock.monotonic(), "start", False))
        finished = sim_clock.wait(30, ctx.cancel)  # 30 simulated seconds of work
        ran.append((sim_clock.monotonic(), "end", bool(ctx.cancel and ctx.cancel.cancelled)))
        return ToolResult("Paris: 2.1 million people" if finished else "cancelled")

    lookup = Tool(ToolSpec("slow_lookup", "Look a city up", {"type": "object", "properties": {}}),
                  ToolKind.READ, slow_lookup)
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws",
                     loop_for_provider={"scripted": "direct"},
                     tool_registry_factory=lambda: ToolRegistry([lookup]))
    try:
        recorder = EventRecorder.attach(rt)
        agent = rt.create_agent("researcher", double_texting="interrupt", permission_mode="full-auto")
        s = rt.create_session(agent_id=agent.id, source="web")
        scripted.for_session(s.id, Turn.reply("Let me look.", latency_s=1,
                                              tool_calls=[("slow_lookup", {}), ("slow_lookup", {})]),
                             Turn.reply("Lyon has 0.5 million.", latency_s=1))
        rt.start_process(s.id, "How big is Paris?")
        rt.settle()
        sim_clock.advance(5)
        rt.send_message(s.id, "Never mind, Lyon?")
        rt.settle()
        sim_clock.advance(100)

        assert ran == [(1.0, "start", False), (31.0, "end", False)]  # ran once, to its end
        statuses = [(r.at, r.event.state) for r in recorder.of(s.id, "tool_status")]  # type: ignore[attr-defined]
        assert statuses == [(1.0, "running"), (31.0, "completed"), (31.0, "error")]  # the second: not run
        assert turns(recorder, s.id) == [
            (1.0, "assistant", "Let me look."),
            (31.0, "assistant", INTERRUPTED_MARKER), (31.0, "result", "interrupted"),
            (32.0, "assistant", "Lyon has 0.5 million."), (32.0, "result", "success"),
        ]
        second = scripted.requests_for(s.id)[1]
        tail = [(m.role, m.content) for m in second.messages][-4:]
        assert tail == [("tool", "Paris: 2.1 million people"), ("tool", NOT_RUN_INTERRUPTED),
                        ("assistant", INTERRUPTED_MARKER), ("user", "Never mind, Lyon?")]
    finally:
        rt.shutdown()


def test_interrupt_withdraws_a_pending_approval_and_the_tool_never_runs(sim_clock, scripted, tmp_path):
    ran: list[float] = []

    def write_note(args: dict, ctx: ToolContext) -> ToolResult:
        ran.append(sim_clock.monotonic())
        return ToolResult("written")

    note = Tool(ToolSpec("write_note", "Write a note", {"type": "object", "properties": {}}),
                ToolKind.EDIT, write_note)
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws", loop_for_provider={"scripted": "direct"},
                     tool_registry_factory=lambda: ToolRegistry([note]))
    try:
        recorder = EventRecorder.attach(rt)
        agent = rt.create_agent("scribe", double_texting="interrupt")  # default mode: writes ask
        s = rt.create_session(agent_id=agent.id, source="web")
        scripted.for_session(s.id, Turn.reply("Noting it.", latency_s=1, tool_calls=[("write_note", {})]),
                             Turn.reply("Fine, no note.", latency_s=1))
        rt.start_process(s.id, "Note: buy milk.")
        rt.settle()
        sim_clock.advance(5)
        assert rt.list_approvals(s.id)  # asked at 1 s, still waiting
        rt.send_message(s.id, "Never mind.")
        rt.settle()
        sim_clock.advance(100)
        assert ran == [] and rt.list_approvals(s.id) == []
        resolved = recorder.of(s.id, "approval_resolved")
        assert [(r.at, r.event.behavior, r.event.message) for r in resolved] == [  # type: ignore[attr-defined]
            (5.0, "deny", APPROVAL_WITHDRAWN)]
        assert turns(recorder, s.id) == [
            (1.0, "assistant", "Noting it."),
            (5.0, "assistant", INTERRUPTED_MARKER), (5.0, "result", "interrupted"),
            (6.0, "assistant", "Fine, no note."), (6.0, "result", "success"),
        ]
    finally:
        rt.shutdown()


# --- through the chat bridge -----------------------------------------------------------------


@pytest.fixture
def bot(sim_clock, scripted, tmp_path):
    made: list = []

    def make(policy: str):
        rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws")
        agent = rt.create_agent("bot", double_texting=policy)
        transport = MemoryTransport()
        bridge = ChatBridge(rt, transport, agent_id=agent.id,
                            settings=BridgeSettings(busy_notice="Still on it — one moment.")).start()
        scripted.responder = lambda request: (
            SLOW if request.messages[-1].content == "Tell me about Paris." else Turn.reply("Lyon, then.", latency_s=1))
        made.append((rt, bridge))
        return rt, transport

    yield make
    for rt, bridge in made:
        rt.shutdown()
        bridge.stop()


def chat(rt, transport, first="Tell me about Paris.", second="Actually, Lyon."):
    """alice writes ``first`` at 0 s and ``second`` at 2.5 s; returns the second's outcome
    and what alice received by 10 s, as (kind, text)."""
    assert transport.say("alice", first) == "delivered"
    rt.settle()
    rt.clock.advance(2.5)
    outcome = transport.say("alice", second)
    rt.settle()
    rt.clock.advance(7.5)
    return outcome, [(m.kind, m.text) for m in transport.messages("alice")]


def test_bridge_enqueue_the_participant_gets_both_replies_in_order(bot):
    rt, transport = bot("enqueue")
    outcome, received = chat(rt, transport)
    assert outcome == "delivered"
    assert received == [("reply", FIRST), ("reply", "Lyon, then.")]


def test_bridge_interrupt_the_participant_gets_one_answer_with_both_messages_in_view(bot):
    # one answer per user message (issue 35 item 2): the cut reply stays in the history,
    # marked, and the participant gets the answer to both
    rt, transport = bot("interrupt")
    outcome, received = chat(rt, transport)
    assert outcome == "delivered"
    assert received == [("reply", "Lyon, then.")]
    sid = rt.internals.store.list_sessions()[0].id
    assert CUT in [c for r, c in rt.internals.store.recent_messages(sid, 10) if r == "assistant"]


def test_bridge_reject_the_participant_is_told_and_the_message_is_not_taken(bot):
    rt, transport = bot("reject")
    outcome, received = chat(rt, transport)
    assert outcome == "busy"
    assert received == [("notice", "Still on it — one moment."), ("reply", FIRST)]
    sid = rt.internals.store.list_sessions()[0].id
    assert [c for r, c in rt.internals.store.recent_messages(sid, 10) if r == "user"] == ["Tell me about Paris."]

