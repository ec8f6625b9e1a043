"""Who may talk to an agent, how often, and for how much, through the chat bridge in
simulated time (issue 35 item 7): one conversation per rule.

Given an agent with a conversation mode, a rate limit or a spending cap,
When participants write to it through a ChatBridge,
Then the ones it does not talk to, the ones over their rate limit and the conversations
over a cap get a notice (when to come back, or which cap) and the model is not called.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corvid_actors.chat import ChatBridge, MemoryTransport
from corvid_actors.config import Config
from corvid_actors.errors import BudgetExceededError
from corvid_actors.testing import EventRecorder, sim_runtime
from tests.sim.test_chat_bridge import notices, replies, say

OWNER = "olivia"
MIN = 60.0
#: the simulated clock's start (corvid_actors.testing.clock.DEFAULT_START)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def bot(sim_clock, scripted, tmp_path):
    """A runtime, an agent, and a bridge to it (owner: olivia); ``bot.agent(**settings)``
    changes the agent."""
    rt = sim_runtime(sim_clock, scripted, config=Config(), workspace_dir=tmp_path / "ws")
    agent = rt.create_agent("helper")
    transport = MemoryTransport()
    bridge = ChatBridge(rt, transport, agent_id=agent.id, is_owner={OWNER}.__contains__).start()
    recorder = EventRecorder.attach(rt)
    yield rt, transport, bridge, agent, recorder
    rt.shutdown()
    bridge.stop()


# --- who may talk to the agent ------------------------------------------------------------------


def test_a_private_agent_refuses_a_non_owner_with_a_notice_and_answers_its_owner(bot, scripted):
    rt, transport, bridge, agent, _ = bot
    rt.update_agent(agent.id, conversation_mode="private")
    scripted.reply("Hello Olivia.", match="hello from olivia")
    assert say(rt, transport, "mallory", "hello") == "refused"
    assert say(rt, transport, "mallory", "/status") == "refused"  # commands too
    assert notices(transport, "mallory") == ["Sorry, this bot only talks to its owners."] * 2
    assert bridge.conversation("memory", "mallory") is None  # no session was made for them
    assert scripted.requests == []
    assert say(rt, transport, OWNER, "hello from olivia") == "delivered"
    assert replies(transport, OWNER) == ["Hello Olivia."]


def test_an_allowlist_agent_admits_the_listed_ids_and_owners_only(bot, scripted):
    rt, transport, _, agent, _ = bot
    rt.update_agent(agent.id, conversation_mode="allowlist", conversation_allowlist=["alice", "bob"])
    assert say(rt, transport, "alice", "hi") == "delivered"
    assert say(rt, transport, "bob", "hi") == "delivered"
    assert say(rt, transport, OWNER, "hi") == "delivered"
    assert say(rt, transport, "carol", "hi") == "refused"
    assert notices(transport, "carol") == [
        "Sorry, this bot only talks to invited participants. Ask its owner to add you."]
    assert len(scripted.requests) == 3
    # the list is the agent's: changing it takes effect with the next message
    rt.update_agent(agent.id, conversation_allowlist=["alice", "bob", "carol"])
    assert say(rt, transport, "carol", "hi again") == "delivered"


def test_a_public_agent_admits_anyone(bot, scripted):
    rt, transport, _, agent, _ = bot
    rt.update_agent(agent.id, conversation_mode="public")
    for participant in ("alice", "bob", "a-stranger"):
        assert say(rt, transport, participant, "hello") == "delivered"
        assert len(replies(transport, participant)) == 1
    assert all(not notices(transport, p) for p in ("alice", "bob", "a-stranger"))


# --- how often --------------------------------------------------------------------------------


def test_the_eleventh_message_within_an_hour_gets_a_notice_naming_when_to_come_back(bot, scripted):
    # the original's defaults: 10 messages per 3600 s
    rt, transport, _, agent, _ = bot
    assert (rt.agent_access(agent.id).rate_limit_max, rt.agent_access(agent.id).rate_limit_window_s) == (10, 3600.0)
    for n in range(10):  # one a minute, from 00:00 to 00:09
        assert say(rt, transport, "alice", f"message {n}") == "delivered"
        rt.clock.advance(MIN)
    assert len(scripted.requests) == 10
    rt.clock.advance(20 * MIN + 30)  # 00:30:30
    assert say(rt, transport, "alice", "one more") == "rate_limited"
    assert notices(transport, "alice") == [
        "You have reached the limit of 10 messages per 1 h. You can write again at 2026-01-01 01:00:00 UTC "
        "(in 29 min 30 s)."]
    assert len(scripted.requests) == 10  # the model was not called
    assert say(rt, transport, "bob", "meanwhile") == "delivered"  # each participant has their own count
    assert say(rt, transport, OWNER, "owners are not limited") == "delivered"
    rt.clock.advance(29 * MIN + 29)  # 00:59:59: still inside the window
    assert say(rt, transport, "alice", "now?") == "rate_limited"
    assert notices(transport, "alice")[-1].endswith("at 2026-01-01 01:00:00 UTC (in 1 s).")
    rt.clock.advance(1)  # 01:00:00: the first message has left the window
    scripted.reply("Welcome back.", match="back")
    assert say(rt, transport, "alice", "back") == "delivered"
    assert replies(transport, "alice")[-1] == "Welcome back."
    # ... and the second leaves it at 01:01:00
    assert say(rt, transport, "alice", "and again") == "rate_limited"
    assert notices(transport, "alice")[-1].endswith("at 2026-01-01 01:01:00 UTC (in 1 min).")
    assert rt.clock.now() == T0.replace(hour=1)


def test_the_rate_limit_is_the_agents_setting(bot, scripted):
    rt, transport, _, agent, _ = bot
    rt.update_agent(agent.id, conversation_rate_limit_max=2, conversation_rate_limit_window_s=60)
    assert [say(rt, transport, "alice", f"m{n}") for n in range(3)] == ["delivered", "delivered", "rate_limited"]
    assert notices(transport, "alice") == [
        "You have reached the limit of 2 messages per 1 min. You can write again at 2026-01-01 00:01:00 UTC "
        "(in 1 min)."]
    rt.update_agent(agent.id, conversation_rate_limit_max=0)  # 0: no limit
    assert say(rt, transport, "alice", "m3") == "delivered"


# --- for how much -------------------------------------------------------------------------------


def test_a_session_that_reached_its_cap_has_its_next_turn_refused(bot, scripted):
    rt, transport, bridge, agent, recorder = bot
    rt.update_agent(agent.id, max_budget_usd=0.05)
    scripted.reply("first", cost_usd=0.03)
    scripted.reply("second", cost_usd=0.03)
    assert say(rt, transport, "alice", "one") == "delivered"
    assert say(rt, transport, "alice", "two") == "delivered"  # $0.03 spent: under the cap
    sid = bridge.conversation("memory", "alice").session_id
    assert rt.spend(sid).session_usd == pytest.approx(0.06)
    assert say(rt, transport, "alice", "three") == "refused"
    assert len(scripted.requests) == 2  # the third turn was not started
    assert notices(transport, "alice") == [
        "Sorry, this conversation has reached its spending limit ($0.06 of $0.05), so it gets no more "
        "answers. The bot's owner can raise it."]
    [error] = recorder.of(sid, "session_error")
    assert (error.event.error_type, error.event.severity, error.event.recoverable) == (
        "budget_exceeded", "warning", False)
    assert error.event.message.startswith("This session has reached its spending cap ($0.06 of $0.05)")
    assert [c for r, c in rt.internals.store.recent_messages(sid, 10) if r == "user"] == ["one", "two"]
    assert say(rt, transport, "alice", "/status") == "command"
    assert transport.texts("alice", kind="command")[-1].endswith("\nSpent: $0.06 of $0.05")
    # another conversation with the same agent has its own session budget
    assert say(rt, transport, "bob", "hello") == "delivered"
    # raising the cap lets the conversation go on
    rt.update_agent(agent.id, max_budget_usd=1.0)
    assert say(rt, transport, "alice", "three") == "delivered"


def test_the_agents_cap_counts_every_session(bot, scripted):
    rt, transport, bridge, agent, recorder = bot
    rt.update_agent(agent.id, max_total_budget_usd=0.05)
    scripted.reply("for alice", cost_usd=0.03, match="from alice")
    scripted.reply("for bob", cost_usd=0.03, match="from bob")
    assert say(rt, transport, "alice", "from alice") == "delivered"
    assert say(rt, transport, "bob", "from bob") == "delivered"  # $0.03 spent by the agent so far
    alice = bridge.conversation("memory", "alice").session_id
    spend = rt.spend(alice)
    assert (spend.session_usd, spend.agent_usd, spend.exceeded) == (
        pytest.approx(0.03), pytest.approx(0.06), "agent")
    for participant in ("alice", "carol"):  # carol's first message too: the agent is spent
        assert say(rt, transport, participant, "from " + participant) == "refused"
        assert notices(transport, participant) == [
            "Sorry, this bot has reached its spending limit ($0.06 of $0.05), so it cannot answer now. "
            "Its owner can raise it."]
    assert len(scripted.requests) == 2
    assert [r.event.error_type for r in recorder.of(alice, "session_error")] == ["budget_exceeded"]
    assert say(rt, transport, "alice", "/status") == "command"
    assert transport.texts("alice", kind="command")[-1].endswith("\nSpent: $0.03; the bot: $0.06 of $0.05")
    with pytest.raises(BudgetExceededError) as caught:  # a host starting turns itself asks first
        rt.check_budget(alice)
    assert caught.value.spend.exceeded == "agent"
    assert "max_total_budget_usd" in str(caught.value)


def test_a_message_queued_behind_the_turn_that_reaches_the_cap_gets_one_notice(bot, scripted):
    # the bridge lets "two" through (nothing spent yet); the session refuses its turn and
    # its error event is the participant's one notice; "three" the bridge refuses itself
    rt, transport, bridge, agent, recorder = bot
    rt.update_agent(agent.id, max_budget_usd=0.05, double_texting="enqueue")
    scripted.reply("dear", cost_usd=0.06, latency_s=5)
    assert say(rt, transport, "alice", "one") == "delivered"
    rt.clock.advance(2)
    assert say(rt, transport, "alice", "two") == "delivered"
    rt.clock.advance(60)
    assert replies(transport, "alice") == ["dear"]
    assert notices(transport, "alice") == [
        "Sorry, this bot has reached its spending limit, so this message was not answered. Its owner can raise it."]
    assert say(rt, transport, "alice", "three") == "refused"
    assert len(scripted.requests) == 1
    assert len(notices(transport, "alice")) == 2  # one per message not answered
    sid = bridge.conversation("memory", "alice").session_id
    assert [r.event.error_type for r in recorder.of(sid, "session_error")] == ["budget_exceeded"] * 2
