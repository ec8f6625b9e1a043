"""Chat commands and approval answers under hostile or careless input: a clear answer,
never an exception (which the webhook would turn into HTTP 500), and nothing granted
or approved by accident."""

from __future__ import annotations

import re

import pytest

from corvid_actors.db.ledger import MAX_BALANCE

from .conftest import OWNER, say


def command_replies(transport, participant):
    return transport.texts(participant, kind="command")


@pytest.mark.parametrize("amount", ["²", "١٢", "５", "1e3", "-5", "+5", "0", "0x10", "1_000", "", "12 34"])
def test_grant_takes_ascii_digits_only(bot, amount):
    rt, transport, _ = bot
    assert say(rt, transport, OWNER, f"/grant bob {amount}") == "command"
    [answer] = command_replies(transport, OWNER)
    assert answer.startswith("Usage: /grant <participant> <amount>")
    assert "1 to 1000000" in answer
    assert rt.credit_transactions("bob") == []


def test_grant_applies_the_admin_cap(bot):
    rt, transport, _ = bot
    say(rt, transport, OWNER, "/grant bob 9000000000000000000")
    say(rt, transport, OWNER, "/grant bob 1000001")
    say(rt, transport, OWNER, "/grant bob " + "9" * 5000)  # longer than int() takes
    say(rt, transport, OWNER, "/grant bob 1000000")
    answers = command_replies(transport, OWNER)
    assert answers[0] == answers[1] == answers[2] == "A single grant is at most 1000000 credits (daemon.max_credit_grant)."
    assert answers[3] == "Granted 1000000 credits to bob: balance 1000000."
    assert rt.credit_balance("bob") == 1_000_000


def test_grant_past_the_balance_cap_is_a_clear_answer(sim_clock, scripted, tmp_path):
    from .conftest import make_bot

    rt, transport, bridge = make_bot(sim_clock, scripted, tmp_path, max_grant=10**9)
    try:
        for _ in range(MAX_BALANCE // 10**9):
            say(rt, transport, OWNER, "/grant bob 1000000000")
        assert say(rt, transport, OWNER, "/grant bob 1000000000") == "command"
        last = command_replies(transport, OWNER)[-1]
        assert last.startswith("Cannot grant: a balance is at most")
        assert rt.credit_balance("bob") == MAX_BALANCE
    finally:
        rt.shutdown()
        bridge.stop()


def test_grant_to_an_over_long_participant_id_is_refused(bot):
    rt, transport, _ = bot
    say(rt, transport, OWNER, "/grant " + "b" * 201 + " 5")
    assert command_replies(transport, OWNER)[0].startswith("Cannot grant: ")
    assert rt.credit_balance("b" * 201) == 0


@pytest.mark.parametrize("line", ["yes", "no", "Y", "deny", "yes nope", "no 12", "approve ???"])
def test_a_bad_approval_answer_says_what_is_expected(tool_bot, line):
    rt, transport, _ = tool_bot
    say(rt, transport, "alice", "what files do I have?")
    [request] = transport.texts("alice", kind="approval")
    approval_id = re.match(r"\[APPROVE\?:(\w+)\]", request).group(1)
    assert say(rt, transport, "alice", line) == "unclear"
    [answer] = command_replies(transport, "alice")
    assert f"yes {approval_id}" in answer and f"no {approval_id}" in answer
    assert [a["id"] for a in rt.list_approvals()] == [approval_id]  # still pending, nothing decided
    sid = rt.list_approvals()[0]["session_id"]
    assert [c for r, c in rt.internals.store.recent_messages(sid, 10) if r == "user"] == ["what files do I have?"]
    assert say(rt, transport, "alice", f"yes {approval_id}") == "approved"


def test_yes_without_any_pending_approval_is_still_a_chat_message(bot, scripted):
    rt, transport, _ = bot
    scripted.reply("Great, continuing.", match="yes")
    assert say(rt, transport, "alice", "yes") == "delivered"
    assert transport.texts("alice", kind="reply") == ["Great, continuing."]


def test_free_turns_charge_nothing_and_log_no_error(sim_clock, scripted, tmp_path):
    # the ledger refuses a deduction of 0: with credits_per_turn = 0 the bank must not ask for one
    from loguru import logger

    from corvid_actors.chat import ChatBridge, MemoryTransport
    from corvid_actors.config import Config
    from corvid_actors.testing import sim_runtime

    errors: list[str] = []
    sink = logger.add(lambda m: errors.append(str(m)), level="ERROR")
    rt = sim_runtime(sim_clock, scripted, config=Config().replace(credits={"credits_per_turn": 0}),
                     workspace_dir=tmp_path / "ws", with_credits=True)
    transport = MemoryTransport()
    bridge = ChatBridge(rt, transport).start()
    try:
        scripted.reply("free reply")
        assert say(rt, transport, "zoe", "hello") == "delivered"
        assert transport.texts("zoe", kind="reply") == ["free reply"]
        assert [t["type"] for t in rt.credit_transactions("zoe", 10)] == ["grant"]  # the welcome, no deduction
    finally:
        rt.shutdown()
        bridge.stop()
        logger.remove(sink)
    assert errors == []
