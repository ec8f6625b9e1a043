"""The runtime's own corvid_* tools end to end: sessions of scripted agents (direct loop, simulated
time) message each other through the runtime, with the depth guard, the self-send refusal, the
restricted policy of agent-sourced sessions, approvals, timeout extension and credit checks."""

from __future__ import annotations

import pytest

from corvid_actors.config import Config
from corvid_actors.testing import EventRecorder, sim_runtime


@pytest.fixture
def make_rt(sim_clock, scripted, tmp_path):
    made = []

    def make(*, with_credits: bool = False, **corvid_tools):
        cfg = Config().replace(corvid_tools=corvid_tools) if corvid_tools else Config()
        rt = sim_runtime(sim_clock, scripted, config=cfg, workspace_dir=tmp_path / "ws",
                         loop_for_provider={"scripted": "direct"}, with_credits=with_credits)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.shutdown()


def agents(rt, *names, mode="full-auto"):
    return [rt.create_agent(name, permission_mode=mode, description=f"{name} the tester") for name in names]


def session_of(rt, agent):
    [row] = [s for s in rt.internals.store.list_sessions() if s.agent_id == agent.id]
    return row


def tool_results(scripted, prompt_part):
    """Tool results in the last model request of the conversation started with ``prompt_part``."""
    mine = [r for r in scripted.requests if prompt_part in r.messages[0].content]
    return [m.content for m in mine[-1].messages if m.role == "tool"]


def offered(scripted, prompt_part):
    first = next(r for r in scripted.requests if prompt_part in r.messages[0].content)
    return {t.name for t in first.tools}


def test_a_messages_b_and_gets_bs_reply(make_rt, scripted):
    rt = make_rt()
    alice, bob = agents(rt, "Alice", "Bob")
    scripted.tool_call("corvid_send_message", {"to_agent": "bob", "message": "What is 2+2?"}, match="ask bob")
    scripted.reply("The answer is 4.", match="What is 2+2?")
    scripted.reply("Bob says the answer is 4.", match="ask bob")
    recorder = EventRecorder.attach(rt)
    a = rt.create_session(agent_id=alice.id)
    rt.start_process(a.id, "ask bob what 2+2 makes")
    rt.settle()

    assert tool_results(scripted, "ask bob") == ["Reply from Bob:\nThe answer is 4."]
    assert recorder.last("assistant", a.id).content == "Bob says the answer is 4."
    b = session_of(rt, bob)
    assert (b.source, b.depth, b.channel) == ("agent", 2, f"agent:{a.id}")
    b_prompt = rt.internals.store.recent_messages(b.id, 5)[0][1]
    assert "Message from agent Alice" in b_prompt and "What is 2+2?" in b_prompt


def test_the_recipient_gets_the_restricted_policy_and_cannot_message_on(make_rt, scripted):
    rt = make_rt()
    alice, bob, _ = agents(rt, "Alice", "Bob", "Carol")
    scripted.tool_call("corvid_send_message", {"to_agent": "Bob", "message": "pass it on"}, match="relay")
    scripted.tool_call("corvid_send_message", {"to_agent": "Carol", "message": "hi"}, match="pass it on")
    scripted.reply("I could not reach Carol.", match="pass it on")
    scripted.reply("Done.", match="relay")
    a = rt.create_session(agent_id=alice.id)
    rt.start_process(a.id, "relay to carol via bob")
    rt.settle()

    bob_tools = offered(scripted, "pass it on")
    assert "corvid_send_message" not in bob_tools and "corvid_list_agents" not in bob_tools
    assert {"corvid_extend_timeout", "corvid_check_credits", "read_file"} <= bob_tools
    assert tool_results(scripted, "pass it on") == ["Unknown tool: corvid_send_message"]
    assert [s.agent_id for s in rt.internals.store.list_sessions()].count(bob.id) == 1
    assert "corvid_send_message" in offered(scripted, "relay")


def test_a_chain_a_b_c_d_e_is_refused_at_the_configured_depth(make_rt, scripted):
    rt = make_rt(restrict_agent_sessions=False)  # only the depth guard stops the chain now
    ann, ben, cat, dan, eve = agents(rt, "Ann", "Ben", "Cat", "Dan", "Eve")
    hops = [("start chain", "Ben", "hop one"), ("hop one", "Cat", "hop two"),
            ("hop two", "Dan", "hop three"), ("hop three", "Eve", "hop four")]
    for heard, to, said in hops:
        scripted.tool_call("corvid_send_message", {"to_agent": to, "message": said}, match=heard)
    for heard, name in [("hop three", "Dan"), ("hop two", "Cat"), ("hop one", "Ben"), ("start chain", "Ann")]:
        scripted.reply(f"{name} is done.", match=heard)
    a = rt.create_session(agent_id=ann.id)
    rt.start_process(a.id, "start chain")
    rt.settle()

    assert [session_of(rt, agent).depth for agent in (ben, cat, dan)] == [2, 3, 4]
    assert not [s for s in rt.internals.store.list_sessions() if s.agent_id == eve.id]
    [refusal] = tool_results(scripted, "hop three")
    assert refusal.startswith("Refused") and "deeper than 3" in refusal
    assert tool_results(scripted, "hop two") == ["Reply from Dan:\nDan is done."]
    assert tool_results(scripted, "start chain") == ["Reply from Ben:\nBen is done."]


def test_an_agent_cannot_message_itself(make_rt, scripted):
    rt = make_rt()
    [alice] = agents(rt, "Alice")
    scripted.tool_call("corvid_send_message", {"to_agent": "ALICE", "message": "hello me"}, match="talk")
    scripted.reply("Fine.", match="talk")
    a = rt.create_session(agent_id=alice.id)
    rt.start_process(a.id, "talk to yourself")
    rt.settle()
    assert tool_results(scripted, "talk") == ["You cannot send a message to yourself."]
    assert len(rt.internals.store.list_sessions()) == 1


def test_an_unknown_recipient_is_an_error_naming_the_agents(make_rt, scripted):
    rt = make_rt()
    alice, _ = agents(rt, "Alice", "Bob")
    scripted.tool_call("corvid_send_message", {"to_agent": "Zed", "message": "hi"}, match="zed")
    scripted.reply("No such agent.", match="zed")
    a = rt.create_session(agent_id=alice.id)
    rt.start_process(a.id, "message zed")
    rt.settle()
    [error] = tool_results(scripted, "zed")
    assert "No agent named or with id 'Zed'" in error and "Alice, Bob" in error


def test_a_second_message_resumes_the_same_recipient_session(make_rt, scripted):
    rt = make_rt()
    alice, bob = agents(rt, "Alice", "Bob")
    scripted.tool_call("corvid_send_message", {"to_agent": "Bob", "message": "first question"}, match="twice")
    scripted.reply("First answer.", match="first question")
    scripted.tool_call("corvid_send_message", {"to_agent": "Bob", "message": "second question"}, match="twice")
    scripted.reply("Second answer.", match="second question")
    scripted.reply("Both answered.", match="twice")
    a = rt.create_session(agent_id=alice.id)
    rt.start_process(a.id, "ask bob twice")
    rt.settle()
    assert tool_results(scripted, "twice") == ["Reply from Bob:\nFirst answer.", "Reply from Bob:\nSecond answer."]
    assert session_of(rt, bob).depth == 2  # one recipient session per sender session


def test_corvid_tools_ask_for_approval_in_default_mode(make_rt, scripted):
    rt = make_rt()
    alice, _ = agents(rt, "Alice", "Bob", mode="default")
    scripted.tool_call("corvid_list_agents", {}, match="who")
    scripted.reply("Alice and Bob are here.", match="who")
    recorder = EventRecorder.attach(rt)
    a = rt.create_session(agent_id=alice.id)
    rt.start_process(a.id, "who is there?")
    rt.settle()
    [ask] = [r.event for r in recorder.of(a.id, "approval_request")]
    assert ask.tool_name == "corvid_list_agents"
    rt.resolve_approval(ask.id, "allow")
    rt.settle()
    [listing] = tool_results(scripted, "who")
    assert "- Alice (id " in listing and "[you]" in listing and "- Bob (id " in listing
    assert "Bob the tester" in listing


def test_extend_timeout_is_capped_like_the_supervisor_caps_it(make_rt, scripted):
    rt = make_rt()
    [alice] = agents(rt, "Alice")
    scripted.tool_call("corvid_extend_timeout", {"minutes": 0}, match="more time")
    scripted.tool_call("corvid_extend_timeout", {"minutes": 120}, match="more time")
    scripted.reply("Extended.", match="more time")
    a = rt.create_session(agent_id=alice.id)
    rt.start_process(a.id, "I need more time")
    rt.settle()
    too_small, extended = tool_results(scripted, "more time")
    assert "`minutes` must be a number from 1 to 120" in too_small
    assert extended == ("Timeout extended: this session now stops in 120 minutes (the maximum) unless it is "
                        "active again; its next activity restores the default of 30 minutes.")
    assert rt.session_info(a.id)[a.id]["timeout_s"] == 1800 * 4


def test_check_credits_without_a_bank_says_so(make_rt, scripted):
    rt = make_rt()
    [alice] = agents(rt, "Alice")
    scripted.tool_call("corvid_check_credits", {}, match="credits")
    scripted.reply("No credits here.", match="credits")
    a = rt.create_session(agent_id=alice.id, participant="wallet-1")
    rt.start_process(a.id, "check my credits")
    rt.settle()
    assert tool_results(scripted, "credits") == ["Credits are not enabled on this runtime: no balance to check."]


def test_check_credits_reads_the_credit_bank(make_rt, scripted):
    rt = make_rt(with_credits=True)
    [alice] = agents(rt, "Alice")
    rt.grant_credits("wallet-1", 42)
    scripted.tool_call("corvid_check_credits", {}, match="credits")
    scripted.tool_call("corvid_check_credits", {"wallet_address": "wallet-2"}, match="credits")
    scripted.reply("Checked.", match="credits")
    a = rt.create_session(agent_id=alice.id, participant="wallet-1")
    rt.start_process(a.id, "check my credits")
    rt.settle()
    mine, other = tool_results(scripted, "credits")
    assert mine == "wallet-1 has 42 credits (1 per turn). This is low."
    assert other.startswith("wallet-2 has 0 credits")
