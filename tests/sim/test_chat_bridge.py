"""The chat bridge in simulated time: one session per conversation, replies routed back,
credits per turn, crash restart, approvals relayed to the right participant, chat
commands, and a slow or failing transport that never blocks a session."""

from __future__ import annotations

import io
import re
import threading

import pytest

from corvid_actors.chat import BridgeSettings, ChatBridge, ConsoleTransport, MemoryTransport
from corvid_actors.chat.commands import ApprovalReply, Command, Text, parse_input
from corvid_actors.config import Config
from corvid_actors.db.ledger import Ledger
from corvid_actors.testing import EventRecorder, sim_runtime

OWNER = "olivia"


def make_bot(sim_clock, scripted, tmp_path, *, credits=None, direct=False, settings=None, double_texting=""):
    cfg = Config().replace(credits={"credits_per_turn": 1, "low_credit_threshold": 3,
                                    "free_credits_on_first_message": 10, **(credits or {})},
                           agents={"double_texting": double_texting})
    extra = {"loop_for_provider": {"scripted": "direct"}} if direct else {}
    rt = sim_runtime(sim_clock, scripted, config=cfg, workspace_dir=tmp_path / "ws", with_credits=True,
                     is_owner={OWNER}.__contains__, **extra)
    transport = MemoryTransport()
    bridge = ChatBridge(rt, transport, is_owner={OWNER}.__contains__, settings=settings).start()
    return rt, transport, bridge


@pytest.fixture
def bot(sim_clock, scripted, tmp_path):
    rt, transport, bridge = make_bot(sim_clock, scripted, tmp_path)
    rt.recorder = EventRecorder.attach(rt)
    yield rt, transport, bridge
    rt.shutdown()
    bridge.stop()


def say(rt, transport, participant, text, **kwargs):
    outcome = transport.say(participant, text, **kwargs)
    rt.settle()
    return outcome


def replies(transport, participant):
    return transport.texts(participant, kind="reply")


def notices(transport, participant):
    return transport.texts(participant, kind="notice")


@pytest.mark.parametrize(("line", "parsed"), [
    ("/status", Command("/status")),
    ("  /GRANT bob 5 ", Command("/grant", ("bob", "5"))),
    ("yes 0a1b2c3d", ApprovalReply(True, "0a1b2c3d")),
    ("Approve 0A1B", ApprovalReply(True, "0a1b")),
    ("deny 0a1b2c3d", ApprovalReply(False, "0a1b2c3d")),
    ("no thanks", ApprovalReply(False, "thanks")),  # only a candidate: see the bridge test below
    ("yes abc", ApprovalReply(True, "abc")),        # a candidate the bridge may answer
    ("yes", ApprovalReply(True, "")),
    ("yes 0a1b2c3d please", Text("yes 0a1b2c3d please")),
    ("/", Text("/")),
    ("  hello  ", Text("hello")),
])
def test_parse_input(line, parsed):
    assert parse_input(line) == parsed


# --- conversations ----------------------------------------------------------------------------


def test_first_message_starts_a_chat_session_and_the_reply_comes_back(bot, scripted):
    rt, transport, bridge = bot
    scripted.reply("Hello Alice!")
    assert say(rt, transport, "alice", "hello") == "delivered"
    assert replies(transport, "alice") == ["Hello Alice!"]
    assert notices(transport, "alice")[0].startswith("Welcome! You have 10 free credits")
    conv = bridge.conversation("memory", "alice")
    row = rt.internals.store.get_session(conv.session_id)
    assert (row.source, row.participant, row.channel) == ("chat", "alice", "memory")
    assert rt.internals.store.recent_messages(conv.session_id, 10) == [("user", "hello"), ("assistant", "Hello Alice!")]


def test_each_conversation_has_its_own_session_and_replies_go_to_it(bot, scripted):
    rt, transport, bridge = bot
    scripted.reply("for alice", match="from alice")
    scripted.reply("for bob", match="from bob")
    scripted.reply("for alice elsewhere", match="alice again")
    transport.say("alice", "from alice")
    transport.say("bob", "from bob")
    transport.say("alice", "alice again", channel="other-room")
    rt.settle()
    assert replies(transport, "bob") == ["for bob"]
    assert sorted(replies(transport, "alice")) == ["for alice", "for alice elsewhere"]
    [elsewhere] = [m for m in transport.messages("alice", kind="reply") if m.channel == "other-room"]
    assert elsewhere.text == "for alice elsewhere"
    ids = {bridge.conversation(c, p).session_id for c, p in
           [("memory", "alice"), ("memory", "bob"), ("other-room", "alice")]}
    assert len(ids) == 3


def test_follow_up_messages_go_to_the_same_running_session(bot, scripted):
    rt, transport, bridge = bot
    say(rt, transport, "alice", "one")
    sid = bridge.conversation("memory", "alice").session_id
    say(rt, transport, "alice", "two")
    assert rt.recorder.times("session_started", sid) == [0.0]
    assert [c for r, c in rt.internals.store.recent_messages(sid, 10) if r == "user"] == ["one", "two"]


def test_events_of_other_sessions_are_not_relayed(bot):
    rt, transport, _ = bot
    web = rt.create_session(source="web", participant="alice")
    rt.start_process(web.id, "hello from the web")
    rt.settle()
    assert rt.recorder.of(web.id, "assistant")
    assert transport.sent == []


def test_a_redelivered_message_is_ignored(bot):
    rt, transport, bridge = bot
    assert say(rt, transport, "alice", "hello", message_id="m-1") == "delivered"
    assert say(rt, transport, "alice", "hello", message_id="m-1") == "duplicate"
    sid = bridge.conversation("memory", "alice").session_id
    assert [c for r, c in rt.internals.store.recent_messages(sid, 10) if r == "user"] == ["hello"]


def test_a_restarted_bot_finds_the_conversation_again(bot, scripted):
    rt, transport, bridge = bot
    say(rt, transport, "alice", "remember me")
    sid = bridge.conversation("memory", "alice").session_id
    bridge.stop()
    second_transport = MemoryTransport()
    with ChatBridge(rt, second_transport, is_owner={OWNER}.__contains__) as second:
        scripted.reply("welcome back", match="back again")
        say(rt, second_transport, "alice", "back again")
        assert second.conversation("memory", "alice").session_id == sid
        assert replies(second_transport, "alice") == ["welcome back"]


# --- credits ------------------------------------------------------------------------------


def test_chat_session_is_charged_per_turn(bot):
    rt, transport, _ = bot
    for text in ("one", "two", "three"):
        say(rt, transport, "alice", text)
    assert rt.credit_balance("alice") == 7
    say(rt, transport, "alice", "/credits")
    [answer] = transport.texts("alice", kind="command")
    assert "Credits: 7 (1 per reply)" in answer
    assert answer.count("deduction") == 3 and "grant     +10 → 10 (first_message)" in answer


def test_owner_is_not_charged(bot):
    rt, transport, _ = bot
    for text in ("one", "two"):
        say(rt, transport, OWNER, text)
    assert len(replies(transport, OWNER)) == 2
    assert rt.credit_balance(OWNER) == 0 and rt.credit_transactions(OWNER) == []
    say(rt, transport, OWNER, "/credits")
    assert "you are an owner" in transport.texts(OWNER, kind="command")[0]


def test_low_credit_warning_reaches_the_participant_once(sim_clock, scripted, tmp_path):
    rt, transport, bridge = make_bot(sim_clock, scripted, tmp_path, credits={"free_credits_on_first_message": 5})
    try:
        for text in ("one", "two", "three"):  # 4, 3 (low), 2 (still low)
            say(rt, transport, "alice", text)
        assert [t for t in notices(transport, "alice") if t.startswith("Low credits")] == \
            ["Low credits: 3 remaining. Top up to keep chatting."]
        say(rt, transport, OWNER, "/grant alice 3")  # 5: above the threshold again
        assert transport.texts(OWNER, kind="command") == ["Granted 3 credits to alice: balance 5."]
        say(rt, transport, "alice", "four")  # 4
        say(rt, transport, "alice", "five")  # 3: a new low episode
        assert len([t for t in notices(transport, "alice") if t.startswith("Low credits")]) == 2
    finally:
        rt.shutdown()
        bridge.stop()


def test_exhaustion_mid_session_stops_it_and_refuses_more_until_a_top_up(sim_clock, scripted, tmp_path):
    # a chat agent would interrupt the first answer (issue 35 item 6): this bot queues
    rt, transport, bridge = make_bot(sim_clock, scripted, tmp_path, credits={"free_credits_on_first_message": 1},
                                     double_texting="enqueue")
    recorder = EventRecorder.attach(rt)
    try:
        scripted.reply("first answer", latency_s=5)
        scripted.reply("second answer", latency_s=5)
        # both messages pass the balance check (1 credit), the second waits behind the first
        assert say(rt, transport, "alice", "one") == "delivered"
        assert say(rt, transport, "alice", "two") == "delivered"
        rt.clock.advance(10)
        sid = bridge.conversation("memory", "alice").session_id
        assert recorder.last("error", sid).error_type == "credits_exhausted"
        assert recorder.last("session_stopped", sid).reason == "credits_exhausted"
        assert not rt.is_running(sid)
        assert replies(transport, "alice") == ["first answer", "second answer"]
        assert notices(transport, "alice")[-1].startswith("Session stopped: credits exhausted")
        assert rt.credit_balance("alice") == 0
        assert Ledger(rt.internals.store).count_transactions("alice", "deduction") == 1

        assert say(rt, transport, "alice", "three") == "refused"
        assert notices(transport, "alice")[-1].startswith("You are out of credits")
        assert rt.internals.store.get_session(sid).status == "stopped"  # not started for a refused message

        rt.grant_credits("alice", 5)
        scripted.reply("back with credits", match="four")
        assert say(rt, transport, "alice", "four") == "delivered"
        assert replies(transport, "alice")[-1] == "back with credits"
        assert rt.credit_balance("alice") == 4
    finally:
        rt.shutdown()
        bridge.stop()


# --- crash restart -------------------------------------------------------------------------


def test_crashed_chat_session_restarts_with_backoff_and_answers(bot, scripted):
    rt, transport, bridge = bot
    scripted.crash("model server fell over")
    scripted.reply("Sorry, I am back: hello!")
    say(rt, transport, "alice", "hello")
    sid = bridge.conversation("memory", "alice").session_id
    assert notices(transport, "alice")[-1] == "The assistant stopped unexpectedly; restarting in 5 s (attempt 1)."
    rt.clock.advance(4.9)
    assert replies(transport, "alice") == []
    rt.clock.advance(0.1)
    assert rt.recorder.times("session_started", sid) == [0.0, 5.0]
    assert replies(transport, "alice") == ["Sorry, I am back: hello!"]
    assert "hello" in scripted.requests[-1].messages[-1].content  # the restart resumed with history


def test_message_during_the_restart_backoff_is_not_lost(bot, scripted):
    rt, transport, bridge = bot
    scripted.crash("boom")
    say(rt, transport, "alice", "hi")
    sid = bridge.conversation("memory", "alice").session_id
    rt.clock.advance(2)  # inside the 5 s backoff
    scripted.reply("yes, still here", match="are you there?")
    assert say(rt, transport, "alice", "are you there?") == "delivered"
    assert replies(transport, "alice") == ["yes, still here"]
    assert [c for r, c in rt.internals.store.recent_messages(sid, 10) if r == "user"] == ["hi", "are you there?"]
    rt.clock.advance(10)  # the pending restart finds the session running: no second start
    assert rt.recorder.times("session_started", sid) == [0.0, 2.0]


# --- approvals ------------------------------------------------------------------------------


@pytest.fixture
def tool_bot(sim_clock, scripted, tmp_path):
    rt, transport, bridge = make_bot(sim_clock, scripted, tmp_path, direct=True)
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "notes.txt").write_text("hello\n")
    scripted.tool_call("list_files", {"path": "."})
    scripted.reply("You have notes.txt.")
    yield rt, transport, bridge
    rt.shutdown()
    bridge.stop()


def _approval_id(transport, participant):
    [request] = transport.texts(participant, kind="approval")
    return re.match(r"\[APPROVE\?:(\w+)\]", request).group(1)


def test_approval_request_goes_to_the_participant_and_their_yes_runs_the_tool(tool_bot):
    rt, transport, _ = tool_bot
    say(rt, transport, "alice", "what files do I have?")
    approval_id = _approval_id(transport, "alice")
    assert "yes " + approval_id in transport.texts("alice", kind="approval")[0]
    assert say(rt, transport, "alice", f"yes {approval_id}") == "approved"
    assert replies(transport, "alice") == ["You have notes.txt."]
    assert f"Approval {approval_id} allowed: Approved by alice" in notices(transport, "alice")
    assert rt.list_approvals() == []


def test_approval_answered_by_the_wrong_participant_is_rejected(tool_bot):
    rt, transport, _ = tool_bot
    say(rt, transport, "alice", "what files do I have?")
    approval_id = _approval_id(transport, "alice")
    assert say(rt, transport, "mallory", f"yes {approval_id}") == "rejected"
    assert "not yours to answer" in transport.texts("mallory", kind="command")[0]
    assert [a["id"] for a in rt.list_approvals()] == [approval_id]  # still pending
    assert replies(transport, "alice") == []
    assert rt.internals.store.count_messages(rt.list_approvals()[0]["session_id"]) == 1  # mallory's line was not delivered
    # a prefix of the id works, for the right participant
    assert say(rt, transport, "alice", f"no {approval_id[:5]}") == "denied"
    assert rt.list_approvals() == []


def test_an_owner_may_answer_any_approval(tool_bot):
    rt, transport, _ = tool_bot
    say(rt, transport, "alice", "what files do I have?")
    approval_id = _approval_id(transport, "alice")
    assert say(rt, transport, OWNER, f"no {approval_id}", channel="admin-room") == "denied"
    assert transport.texts(OWNER, kind="command") == [f"Denied {approval_id}."]
    assert f"Approval {approval_id} denied: Denied by {OWNER}" in notices(transport, "alice")


def test_yes_and_no_without_a_matching_approval_are_ordinary_messages(bot, scripted):
    rt, transport, bridge = bot
    scripted.reply("Alright.", match="no thanks")
    assert say(rt, transport, "alice", "no thanks") == "delivered"
    assert replies(transport, "alice") == ["Alright."]


# --- commands ---------------------------------------------------------------------------------


def test_help_status_stop_and_unknown_commands(bot):
    rt, transport, bridge = bot
    assert say(rt, transport, "alice", "/status") == "command"
    assert say(rt, transport, "alice", "/help") == "command"
    say(rt, transport, "alice", "hello")
    sid = bridge.conversation("memory", "alice").session_id
    say(rt, transport, "alice", "/status")
    say(rt, transport, "alice", "/stop")
    say(rt, transport, "alice", "/stop")
    say(rt, transport, "alice", "/dance")
    answers = transport.texts("alice", kind="command")
    assert answers[0] == "No session yet: send a message to start one."
    assert all(c in answers[1] for c in ("/status", "/stop", "/credits", "/help", "yes <id>"))
    assert answers[2].splitlines() == [f"Session {sid[:8]}: running", "Turns: 1", "Credits: 9 (1 per reply)"]
    assert answers[3] == "Stopped. Your next message starts the session again."
    assert answers[4] == "Nothing is running."
    assert answers[5].startswith("Unknown command /dance.")
    assert rt.internals.store.get_session(sid).status == "stopped"
    assert not [t for t in notices(transport, "alice") if "stopped" in t.lower()]  # /stop answered once
    say(rt, transport, "alice", "hello again")  # resumes the stopped session
    assert rt.is_running(sid)


def test_only_owners_grant_credits(bot):
    rt, transport, _ = bot
    say(rt, transport, "alice", "/grant alice 1000")
    say(rt, transport, OWNER, "/grant bob ten")
    assert transport.texts("alice", kind="command") == ["Only an owner can grant credits."]
    assert transport.texts(OWNER, kind="command")[0].startswith("Usage: /grant")
    assert rt.credit_transactions("alice") == [] and rt.credit_transactions("bob") == []


# --- transports that are slow or fail ---------------------------------------------------------------


def test_a_slow_transport_never_blocks_the_sessions(sim_clock, scripted, tmp_path):
    rt, transport, bridge = make_bot(sim_clock, scripted, tmp_path,
                                     settings=BridgeSettings(track_delivery=False))
    recorder = EventRecorder.attach(rt)
    transport.gate = threading.Event()  # the platform hangs
    try:
        for participant in ("alice", "bob"):
            for text in ("one", "two", "three"):
                transport.say(participant, text)
                rt.settle()  # returns: the sessions do not wait for the platform
        assert len(recorder.of(type="result")) == 6
        assert transport.sent == []
    finally:
        transport.gate.set()
        rt.shutdown()
        bridge.stop()  # drains the outbox
    assert len(replies(transport, "alice")) == 3 and len(replies(transport, "bob")) == 3


def test_a_failing_transport_loses_only_the_failed_message(bot):
    rt, transport, bridge = bot
    transport.fail_next(2)  # the welcome notice and the first reply
    say(rt, transport, "alice", "one")
    say(rt, transport, "alice", "two")
    assert replies(transport, "alice") == ["ok"]
    assert bridge.stats["failed"] == 2
    assert rt.is_running(bridge.conversation("memory", "alice").session_id)


def test_console_transport_without_credits(sim_clock, scripted, tmp_path):
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws")
    out = io.StringIO()
    console = ConsoleTransport("alice", input=io.StringIO("hello\n\n/credits\n"), output=out)
    scripted.reply("Hi Alice.")
    bridge = ChatBridge(rt, console)
    try:
        bridge.start()
        assert console.finished.wait(2)  # the whole input was read and handled
        rt.settle()
        lines = out.getvalue().splitlines()
        assert sorted(lines) == ["Credits are not enabled on this bot.", "bot> Hi Alice."]
    finally:
        rt.shutdown()
        bridge.stop()
