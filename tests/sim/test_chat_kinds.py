"""Agent kinds and one answer per message through the chat bridge, in simulated time
(issue 35 items 1 and 2): the issue's probe conversation — a question back, a short
answer, a long answer — costs a ``chat`` agent one model call per message, and both kinds
deliver exactly one reply per message, the turn's final text; the history keeps every
message."""

from __future__ import annotations

import re

import pytest
from loguru import logger

from corvid_actors.chat import BridgeSettings, ChatBridge, MemoryTransport
from corvid_actors.config import Config
from corvid_actors.testing import sim_runtime
from tests.fixtures.probe_conversation import LONG, PARIS, QUESTIONS, SHORT


def make_bot(sim_clock, scripted, tmp_path, *, kind=None, agent=True, config=None, settings=None):
    """A bridge over the direct loop (the one with nudges) and a MemoryTransport."""
    rt = sim_runtime(sim_clock, scripted, config=config or Config(), workspace_dir=tmp_path / "ws",
                     loop_for_provider={"scripted": "direct"})
    agent_id = None
    if agent:
        agent_id = rt.create_agent("helper", **({"kind": kind} if kind else {})).id
    transport = MemoryTransport()
    bridge = ChatBridge(rt, transport, agent_id=agent_id, settings=settings).start()
    return rt, transport, bridge


@pytest.fixture
def bots(sim_clock, scripted, tmp_path):
    made = []

    def make(**kwargs):
        made.append(make_bot(sim_clock, scripted, tmp_path, **kwargs))
        return made[-1]

    yield make
    for rt, _, bridge in made:
        rt.shutdown()
        bridge.stop()


def converse(rt, transport, *questions):
    for question in questions:
        transport.say("alice", question)
        rt.settle()


def stored(rt, transport, role):
    [sid] = {m.session_id for m in transport.sent if m.session_id}
    return [m.content for m in rt.history(sid) if m.role == role]


def test_the_probe_conversation_costs_a_chat_agent_one_call_and_one_reply_per_message(bots, scripted):
    rt, transport, _ = bots(kind="chat")
    for answer in (PARIS, SHORT, LONG):
        scripted.reply(answer)
    converse(rt, transport, *QUESTIONS)
    assert len(scripted.requests) == 3
    assert transport.texts("alice", kind="reply") == [PARIS, SHORT, LONG]
    assert transport.texts("alice", kind="notice") == []


def test_the_probe_conversation_gives_a_task_agent_one_reply_per_message(bots, scripted):
    # each answer is nudged once (asked instead of acting, too short, wrote but didn't act);
    # the model's second answer ends the turn, and only it reaches the participant
    rt, transport, _ = bots(kind="task")
    finals = ["Paris, in France.", "I can help with that.", "That is the French Revolution in brief."]
    for first, final in zip((PARIS, SHORT, LONG), finals, strict=True):
        scripted.reply(first)
        scripted.reply(final)
    converse(rt, transport, *QUESTIONS)
    assert len(scripted.requests) == 6
    assert transport.texts("alice", kind="reply") == finals
    # the history keeps every message: the model needs the nudged answers and the nudges
    assert stored(rt, transport, "assistant") == [PARIS, finals[0], SHORT, finals[1], LONG, finals[2]]
    assert stored(rt, transport, "user") == QUESTIONS


def test_a_bridge_without_an_agent_runs_chat_sessions(bots, scripted):
    rt, transport, _ = bots(agent=False)
    scripted.reply(PARIS)
    converse(rt, transport, QUESTIONS[0])
    assert len(scripted.requests) == 1 and transport.texts("alice", kind="reply") == [PARIS]


def test_an_agent_without_a_kind_is_a_chat_agent_behind_a_bridge(bots, scripted):
    rt, transport, _ = bots()  # the row's kind is NULL; [agents] default_kind is "task"
    assert rt.agent("helper").kind is None
    scripted.reply(SHORT)
    converse(rt, transport, QUESTIONS[1])
    assert len(scripted.requests) == 1 and transport.texts("alice", kind="reply") == [SHORT]


def test_a_task_agent_behind_a_bridge_says_so_in_the_log_once(sim_clock, scripted, tmp_path):
    lines: list[str] = []
    sink = logger.add(lines.append, level="WARNING", format="{message}")
    logger.enable("corvid_actors")  # a library's logs are off until its host turns them on
    try:
        rt, transport, bridge = make_bot(sim_clock, scripted, tmp_path, kind="task")
        scripted.reply("Paris.")
        converse(rt, transport, QUESTIONS[0])
        transport.say("alice", QUESTIONS[0])
        scripted.reply("Still Paris.")
        rt.settle()
    finally:
        logger.disable("corvid_actors")
        logger.remove(sink)
        rt.shutdown()
        bridge.stop()
    warned = [line for line in lines if "task agent" in line]
    assert len(warned) == 1 and "nudged" in warned[0] and "'helper'" in warned[0]


def test_the_final_text_after_a_tool_is_the_one_reply(bots, scripted, tmp_path):
    rt, transport, _ = bots(kind="chat")
    (tmp_path / "ws").mkdir(exist_ok=True)
    scripted.tool_call("list_files", {"path": "."}, text="Let me look at your files.")
    scripted.reply("You have no files yet.")
    converse(rt, transport, "what files do I have?")
    # the approval prompt is delivered as before; the words before the tool call are not a reply
    [approval] = transport.texts("alice", kind="approval")
    assert transport.texts("alice", kind="reply") == []
    converse(rt, transport, "yes " + re.match(r"\[APPROVE\?:(\w+)\]", approval).group(1))
    assert transport.texts("alice", kind="reply") == ["You have no files yet."]
    assert "Let me look at your files." in stored(rt, transport, "assistant")


def test_a_turn_without_text_gets_the_empty_turn_notice(bots, scripted):
    rt, transport, _ = bots(kind="chat")
    scripted.reply("")
    converse(rt, transport, "hello?")
    assert transport.texts("alice", kind="reply") == []
    assert transport.texts("alice", kind="notice") == [BridgeSettings().empty_turn_notice]


def test_the_empty_turn_notice_is_a_setting(bots, scripted):
    rt, transport, _ = bots(kind="chat", settings=BridgeSettings(empty_turn_notice="(no answer)"))
    scripted.reply("   ")
    converse(rt, transport, "hello?")
    assert transport.texts("alice", kind="notice") == ["(no answer)"]


def test_the_default_kind_is_a_setting(sim_clock, scripted, tmp_path):
    cfg = Config().replace(agents={"default_kind": "chat"})
    rt = sim_runtime(sim_clock, scripted, config=cfg, workspace_dir=tmp_path / "ws",
                     loop_for_provider={"scripted": "direct"})
    try:
        agent = rt.create_agent("helper")
        session = rt.create_session(agent_id=agent.id, source="web")
        scripted.reply(SHORT)
        rt.start_process(session.id, "Can you help me?")
        rt.settle()
        assert len(scripted.requests) == 1  # a web session of a kind-less agent: [agents] default_kind
    finally:
        rt.shutdown()


def test_an_agent_kind_is_task_or_chat(sim_clock, scripted, tmp_path):
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws")
    try:
        assert rt.create_agent("a", kind="chat").kind == "chat"
        with pytest.raises(ValueError, match="kind"):
            rt.create_agent("b", kind="assistant")
        with pytest.raises(ValueError, match="kind"):
            rt.update_agent(rt.agent("a").id, kind="bot")
        assert rt.update_agent(rt.agent("a").id, kind="task").kind == "task"
    finally:
        rt.shutdown()
