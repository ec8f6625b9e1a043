"""Delegation is visible and bounded: the approval of corvid_send_message names the
recipient and shows the message; a recipient session never gets more permission than
its sender's mode (the stricter of the two applies, down the whole chain) and works in
its own agent's project unless the sender shares its project explicitly."""

from __future__ import annotations

import pytest

from corvid_actors.config import Config
from corvid_actors.testing import EventRecorder, sim_runtime
from corvid_actors.tools.delegation import effective_agent_mode, stricter_mode


@pytest.fixture
def rt(sim_clock, scripted, tmp_path):
    runtime = sim_runtime(sim_clock, scripted, config=Config().replace(corvid_tools={"restrict_agent_sessions": False}),
                          workspace_dir=tmp_path / "ws", loop_for_provider={"scripted": "direct"})
    yield runtime
    runtime.shutdown()


def session_of(rt, agent):
    [row] = [s for s in rt.internals.store.list_sessions() if s.agent_id == agent.id]
    return row


def results(scripted, prompt_part):
    mine = [r for r in scripted.requests if prompt_part in r.messages[0].content]
    return [m.content for m in mine[-1].messages if m.role == "tool"]


@pytest.mark.parametrize(("a", "b", "stricter"), [
    ("plan", "full-auto", "plan"), ("full-auto", "plan", "plan"), ("default", "auto-edit", "default"),
    ("auto-edit", "full-auto", "auto-edit"), ("full-auto", "full-auto", "full-auto"), ("plan", "default", "plan"),
])
def test_stricter_mode(a, b, stricter):
    assert stricter_mode(a, b) == stricter_mode(b, a) == stricter


def test_the_approval_names_the_recipient_and_shows_the_message(rt, scripted):
    alice = rt.create_agent("Alice", permission_mode="default")
    rt.create_agent("Bob", permission_mode="default")
    scripted.tool_call("corvid_send_message", {"to_agent": "Bob", "message": "Please delete [all] the logs"},
                       match="delegate")
    scripted.reply("Asked.", match="delegate")
    recorder = EventRecorder.attach(rt)
    a = rt.create_session(agent_id=alice.id)
    rt.start_process(a.id, "delegate the cleanup")
    rt.settle()
    [ask] = [r.event for r in recorder.of(a.id, "approval_request")]
    assert ask.tool_name == "corvid_send_message"
    assert ask.description == "Message agent Bob: Please delete [all] the logs"
    rt.resolve_approval(ask.id, "deny")
    rt.settle()


def test_a_plan_mode_sender_cannot_make_a_full_auto_agent_write(rt, scripted, tmp_path):
    mine = rt.create_project("planner-project", tmp_path / "planner")
    writer_home = rt.create_project("writer-project", tmp_path / "writer")
    planner = rt.create_agent("Planner", permission_mode="plan")
    writer = rt.create_agent("Writer", permission_mode="full-auto", default_project=writer_home.id)
    # in plan mode the send itself asks (OTHER tools ask in plan); the operator allows it
    scripted.tool_call("corvid_send_message", {"to_agent": "Writer", "message": "write notes.txt"}, match="get it")
    scripted.tool_call("write_file", {"path": "notes.txt", "content": "pwned"}, match="write notes.txt")
    scripted.reply("I could not write.", match="write notes.txt")
    scripted.reply("Done.", match="get it")
    recorder = EventRecorder.attach(rt)
    p = rt.create_session(agent_id=planner.id, project_id=mine.id)
    rt.start_process(p.id, "get it written")
    rt.settle()
    [ask] = [r.event for r in recorder.of(p.id, "approval_request")]
    rt.resolve_approval(ask.id, "allow")
    rt.settle()

    w = session_of(rt, writer)
    assert w.project_id == writer_home.id  # its own agent's project, not the sender's
    assert effective_agent_mode(rt.internals.store, w) == "plan"
    [denied] = results(scripted, "write notes.txt")
    assert "plan mode" in denied
    assert not (tmp_path / "writer" / "notes.txt").exists()
    assert not (tmp_path / "planner" / "notes.txt").exists()


def test_a_recipient_without_a_project_never_gets_the_senders(rt, scripted, tmp_path):
    mine = rt.create_project("sender-project", tmp_path / "sender")
    alice = rt.create_agent("Alice", permission_mode="full-auto")
    bob = rt.create_agent("Bob", permission_mode="full-auto")
    scripted.tool_call("corvid_send_message", {"to_agent": "Bob", "message": "hi"}, match="say hi")
    scripted.reply("Hello.", match="hi")
    a = rt.create_session(agent_id=alice.id, project_id=mine.id)
    rt.start_process(a.id, "say hi to bob")
    rt.settle()
    assert session_of(rt, bob).project_id is None


def test_an_explicitly_shared_project_is_used_and_shown(rt, scripted, tmp_path):
    mine = rt.create_project("sender-project", tmp_path / "sender")
    alice = rt.create_agent("Alice", permission_mode="default")
    bob = rt.create_agent("Bob", permission_mode="full-auto")
    scripted.tool_call("corvid_send_message", {"to_agent": "Bob", "message": "review it", "share_project": True},
                       match="share")
    scripted.reply("Reviewed.", match="review it")
    scripted.reply("Done.", match="share")
    recorder = EventRecorder.attach(rt)
    a = rt.create_session(agent_id=alice.id, project_id=mine.id)
    rt.start_process(a.id, "share the project with bob")
    rt.settle()
    [ask] = [r.event for r in recorder.of(a.id, "approval_request")]
    assert ask.description == "Message agent Bob (sharing this session's project): review it"
    rt.resolve_approval(ask.id, "allow")
    rt.settle()
    b = session_of(rt, bob)
    assert b.project_id == mine.id
    assert effective_agent_mode(rt.internals.store, b) == "default"  # bounded by Alice's mode


def test_the_bound_holds_down_a_chain(rt, scripted):
    ann = rt.create_agent("Ann", permission_mode="auto-edit")
    rt.create_agent("Ben", permission_mode="full-auto")
    cat = rt.create_agent("Cat", permission_mode="full-auto")
    scripted.tool_call("corvid_send_message", {"to_agent": "Ben", "message": "hop one"}, match="start")
    scripted.tool_call("corvid_send_message", {"to_agent": "Cat", "message": "hop two"}, match="hop one")
    scripted.reply("Cat done.", match="hop two")
    scripted.reply("Ben done.", match="hop one")
    scripted.reply("Ann done.", match="start")
    recorder = EventRecorder.attach(rt)
    a = rt.create_session(agent_id=ann.id)
    rt.start_process(a.id, "start the chain")
    rt.settle()
    for ask in [r.event for r in recorder.of(None, "approval_request")]:  # auto-edit asks for OTHER tools
        rt.resolve_approval(ask.id, "allow")
        rt.settle()
    for ask in [r.event for r in recorder.of(None, "approval_request")]:
        rt.resolve_approval(ask.id, "allow")
        rt.settle()
    assert effective_agent_mode(rt.internals.store, session_of(rt, cat)) == "auto-edit"
