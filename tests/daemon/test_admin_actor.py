"""The AdminActor in simulated time: operator commands as messages, answered from the
supervisor, the approval broker, the credit bank and the store."""

from __future__ import annotations

import io

import pytest

from corvid_actors.actors.admin import (
    AdminActor,
    AdminCommand,
    AdminWiring,
    BeginShutdown,
    Follow,
    Ready,
)
from corvid_actors.chat.commands import approval_text
from corvid_actors.config import Config, DaemonConfig
from corvid_actors.daemon.render import show_result
from corvid_actors.errors import AdminError
from corvid_actors.testing import sim_runtime


def make(sim_clock, scripted, tmp_path, *, credits=False, settings=None, shutdown=None, direct=False):
    extra = {"loop_for_provider": {"scripted": "direct"}} if direct else {}
    rt = sim_runtime(sim_clock, scripted, config=Config(), workspace_dir=tmp_path / "ws", with_credits=credits,
                     **extra)
    admin = AdminActor.start(rt.internals.tracker, AdminWiring(
        supervisor=rt.internals.supervisor, approvals=rt.internals.approvals, bus=rt.internals.bus, timers=rt.internals.timers, slot_pool=rt.internals.slot_pool,
        credits=rt.internals.credits, store=rt.internals.store, providers=rt.internals.providers, clock=rt.clock,
        settings=settings or DaemonConfig(), about={"pid": 1}, request_shutdown=shutdown,
    ))
    assert admin.ask(Ready()) is True
    return rt, admin


@pytest.fixture
def admin_rt(sim_clock, scripted, tmp_path):
    rt, admin = make(sim_clock, scripted, tmp_path)
    yield rt, admin
    admin.stop()
    rt.shutdown()


def command(admin, name, /, **args):  # positional: `start` takes a `name` argument
    if name == "start":
        args.setdefault("create", True)  # most tests name a new agent
    return admin.ask(AdminCommand(name, args))


def failure(admin, name, /, **args) -> AdminError:
    with pytest.raises(AdminError) as caught:
        command(admin, name, **args)
    return caught.value


def test_start_then_list_and_show_a_session(admin_rt, scripted):
    rt, admin = admin_rt
    scripted.reply("Hi there.", latency_s=1.0)
    started = command(admin, "start", agent="helper", prompt="hello", source="chat", participant="alice")
    assert started["created_agent"] is True and started["agent"] == "helper"
    rt.settle()
    rt.clock.advance(2)
    [row] = command(admin, "sessions")
    assert (row["id"], row["status"], row["agent"], row["source"], row["turns"]) == (
        started["session"], "running", "helper", "chat", 1)
    assert row["uptime_s"] == 2.0 and row["pending_approvals"] == 0
    detail = command(admin, "session", session=started["session"][:6])
    assert [(m["role"], m["content"]) for m in detail["messages"]] == [("user", "hello"), ("assistant", "Hi there.")]
    assert [e["type"] for e in detail["events"] if e["type"] in ("session_started", "result")] == [
        "session_started", "result"]
    assert command(admin, "sessions", status="stopped") == []
    assert command(admin, "start", agent="HELPER", prompt="again")["created_agent"] is False


def test_start_with_an_unknown_agent_is_an_error_listing_the_agents(admin_rt):
    rt, admin = admin_rt
    rt.create_agent("helper")
    rt.create_agent("coder")
    error = failure(admin, "start", agent="helpr", prompt="hi", create=False)
    assert error.code == "not_found"
    assert "no agent 'helpr'" in error.message and "coder, helper" in error.message and "--create" in error.message
    assert [a.name for a in rt.internals.store.list_agents()] == ["coder", "helper"]  # nothing created
    assert rt.internals.store.list_sessions() == []


def test_start_create_makes_the_agent_with_its_settings_and_refuses_different_ones(admin_rt):
    rt, admin = admin_rt
    started = command(admin, "start", agent="writer", prompt="hi", create=True, model="qwen3:8b",
                      permission_mode="auto-edit")
    assert started["created_agent"] is True
    agent = rt.internals.store.find_agent("writer")
    assert (agent.model, agent.permission_mode) == ("qwen3:8b", "auto-edit")
    assert command(admin, "start", agent="writer", prompt="again", create=True)["created_agent"] is False
    error = failure(admin, "start", agent="writer", prompt="x", create=True, model="llama3.1:8b")
    assert error.code == "conflict" and "model is 'qwen3:8b', not 'llama3.1:8b'" in error.message
    assert rt.internals.store.find_agent("writer").model == "qwen3:8b"  # unchanged


def test_send_is_persisted_and_resumes_an_ended_session_with_history(admin_rt, scripted):
    rt, admin = admin_rt
    sid = command(admin, "start", agent="a", prompt="first")["session"]
    rt.settle()
    assert command(admin, "stop", session=sid) == {"session": sid, "was_running": True, "was_paused": False,
                                                   "already_stopped": False}
    assert command(admin, "stop", session=sid)["was_running"] is False
    sent = command(admin, "send", session=sid, text="second")
    assert sent["delivered"] is True
    assert ("user", "second") in rt.internals.store.recent_messages(sid, 10)
    rt.settle()
    assert "<conversation_history>" in scripted.requests[-1].messages[-1].content


def test_stop_on_a_stopped_session_says_so_and_publishes_no_second_stopped(admin_rt):
    rt, admin = admin_rt
    sid = command(admin, "start", agent="a", prompt="first")["session"]
    rt.settle()
    assert command(admin, "stop", session=sid)["already_stopped"] is False
    rt.settle()
    again = command(admin, "stop", session=sid)
    rt.settle()
    assert again == {"session": sid, "was_running": False, "was_paused": False, "already_stopped": True}
    events = [e["type"] for e in command(admin, "session", session=sid, events=50)["events"]]
    assert events.count("session_stopped") == 1
    assert rt.internals.store.get_session(sid).status == "stopped"
    # an ended (idle) session is not "stopped": stopping it still marks it so, once
    other = command(admin, "start", agent="a", prompt="second")["session"]
    rt.settle()
    rt.internals.store.update_session(other, status="idle")
    rt.stop_process(other)  # the running incarnation goes; the row says stopped
    assert command(admin, "stop", session=other)["already_stopped"] is True


def test_resume_covers_paused_running_and_ended_sessions(admin_rt, scripted):
    rt, admin = admin_rt
    scripted.outage("connection refused")
    sid = command(admin, "start", agent="a", prompt="go")["session"]
    rt.settle()
    assert command(admin, "sessions")[0]["paused_until"] is not None
    assert command(admin, "resume", session=sid) == {"session": sid, "how": "resumed_paused"}
    rt.settle()
    assert command(admin, "resume", session=sid) == {"session": sid, "how": "already_running"}
    command(admin, "stop", session=sid)
    assert command(admin, "resume", session=sid)["how"] == "resumed_with_history"


def test_extend_needs_a_running_session_and_is_capped(admin_rt):
    rt, admin = admin_rt
    sid = command(admin, "start", agent="a", prompt="go")["session"]
    rt.settle()
    extended = command(admin, "extend", session=sid, minutes=10)
    assert (extended["timeout_s"], extended["capped"]) == (600.0, False)  # replaces, not adds
    capped = command(admin, "extend", session=sid, minutes=10_000)
    assert (capped["timeout_s"], capped["capped"], capped["requested_s"]) == (4 * 1800.0, True, 600_000.0)
    command(admin, "stop", session=sid)
    assert failure(admin, "extend", session=sid, minutes=1).code == "conflict"


def test_a_queued_approval_has_no_timeout(sim_clock, scripted, tmp_path):
    rt, admin = make(sim_clock, scripted, tmp_path, direct=True)
    try:
        (tmp_path / "ws").mkdir(exist_ok=True)
        command(admin, "mode", mode="queued")
        scripted.tool_call("list_files", {"path": "."})
        scripted.reply("Done.")
        sid = command(admin, "start", agent="careful", prompt="list files")["session"]
        rt.settle()
        [pending] = command(admin, "approvals")
        assert pending["timeout_s"] is None  # it waits for a human: no countdown to show
        [asked] = [e for e in command(admin, "session", session=sid)["events"] if e["type"] == "approval_request"]
        assert asked["timeout_s"] == 0.0  # nor in the event chat bridges and followers see
        assert "waits for your answer" in approval_text(asked["id"], asked["description"], asked["timeout_s"])
        rt.clock.advance(600)  # far past the normal 55 s / 120 s approval timeouts
        assert command(admin, "approvals") == [pending]  # and it did not expire
    finally:
        admin.stop()
        rt.shutdown()


def test_unknown_and_ambiguous_session_ids(admin_rt):
    rt, admin = admin_rt
    rt.internals.store.create_session(session_id="abcd-1")
    rt.internals.store.create_session(session_id="abcd-2")
    assert failure(admin, "stop", session="nope-nope").code == "not_found"
    assert failure(admin, "stop", session="ab").code == "not_found"
    assert failure(admin, "stop", session="abcd").code == "bad_request"
    assert command(admin, "stop", session="abcd-2")["session"] == "abcd-2"


def test_approvals_are_listed_and_resolved(sim_clock, scripted, tmp_path):
    rt, admin = make(sim_clock, scripted, tmp_path, direct=True)
    try:
        (tmp_path / "ws").mkdir(exist_ok=True)
        scripted.tool_call("list_files", {"path": "."})
        scripted.reply("Done.")
        sid = command(admin, "start", agent="careful", prompt="list files")["session"]
        rt.settle()
        [pending] = command(admin, "approvals")
        assert (pending["session_id"], pending["tool_name"]) == (sid, "list_files")
        assert pending["timeout_s"] > 0 and pending["created_at"].endswith("Z")  # normal mode: it expires
        assert command(admin, "sessions")[0]["pending_approvals"] == 1
        assert command(admin, "approvals", session=sid) == [pending]
        resolved = command(admin, "approve", approval=pending["id"], session_wide=True)
        assert resolved["behavior"] == "allow_session"
        assert failure(admin, "deny", approval=pending["id"]).code == "not_found"
        rt.settle()
        assert command(admin, "approvals") == []
        assert command(admin, "mode", mode="paused") == {"mode": "paused"}
        assert command(admin, "mode") == {"mode": "paused"}
        assert failure(admin, "mode", mode="sideways").code == "bad_request"
    finally:
        admin.stop()
        rt.shutdown()


def test_credit_commands_explain_when_there_is_no_credit_bank(admin_rt):
    _, admin = admin_rt
    error = failure(admin, "credits_balance", participant="alice")
    assert error.code == "unavailable" and "daemon.with_credits" in error.message


def test_credit_commands_grant_and_show_balances(sim_clock, scripted, tmp_path):
    rt, admin = make(sim_clock, scripted, tmp_path, credits=True, settings=DaemonConfig(max_credit_grant=100))
    try:
        assert command(admin, "credits_grant", participant="bob", amount=60, reason="welcome")["balance"] == 60
        assert command(admin, "credits_grant", participant="bob", amount=40)["balance"] == 100
        assert failure(admin, "credits_grant", participant="bob", amount=101).code == "bad_request"
        shown = command(admin, "credits_balance", participant="bob", transactions=5)
        assert shown["balance"] == 100 and [t["amount"] for t in shown["transactions"]] == [40, 60]
    finally:
        admin.stop()
        rt.shutdown()


def test_shutdown_asks_the_daemon_and_then_new_work_is_refused(sim_clock, scripted, tmp_path):
    asked: list[str] = []
    rt, admin = make(sim_clock, scripted, tmp_path, shutdown=asked.append)
    try:
        assert command(admin, "shutdown", reason="maintenance") == {"shutting_down": True, "pid": 1}
        assert asked == ["maintenance"]
        assert failure(admin, "start", agent="a", prompt="late").code == "shutting_down"
        assert command(admin, "sessions") == []  # reading still works
    finally:
        admin.stop()
        rt.shutdown()


def test_without_a_daemon_shutdown_is_unavailable_and_begin_shutdown_refuses_work(admin_rt):
    _, admin = admin_rt
    assert failure(admin, "shutdown").code == "unavailable"
    admin.tell(BeginShutdown())
    assert failure(admin, "send", session="abcd", text="x").code == "shutting_down"


def test_health_probes_providers_off_the_mailbox_and_stats_sum_up_the_actors(admin_rt, scripted):
    rt, admin = admin_rt
    scripted.health_results = [False, True]
    future = command(admin, "health")
    first = future.get()
    assert first["status"] == "degraded" and first["providers"] == {"scripted": {"healthy": False}}
    assert first["daemon"]["pid"] == 1 and all(first["actors"].values())
    assert command(admin, "health").get()["status"] == "ok"
    stats = command(admin, "stats")
    assert set(stats) >= {"supervisor", "event_bus", "timers", "slots", "admin", "process"}


def test_recent_events_are_bounded_and_followers_see_only_their_session(sim_clock, scripted, tmp_path):
    rt, admin = make(sim_clock, scripted, tmp_path, settings=DaemonConfig(recent_events=3, recent_event_sessions=2))
    try:
        seen: list[tuple[str, str]] = []
        first = command(admin, "start", agent="a", prompt="one")["session"]
        unfollow = admin.ask(Follow(first, lambda sid, at, event: seen.append((sid, event["type"]))))
        second = command(admin, "start", agent="a", prompt="two")["session"]
        rt.settle()
        command(admin, "send", session=first, text="more")
        rt.settle()
        assert {sid for sid, _ in seen} == {first} and ("result" in [t for _, t in seen])
        assert len(command(admin, "session", session=first)["events"]) == 3  # of many more
        assert command(admin, "session", session=second)["events"] != []
        command(admin, "start", agent="a", prompt="three")
        rt.settle()
        # two sessions are kept: the one least recently heard from (second) is forgotten
        assert command(admin, "session", session=second)["events"] == []
        assert len(command(admin, "session", session=first)["events"]) == 3
        unfollow()
        rt.settle()
        count = len(seen)
        command(admin, "send", session=first, text="unseen")
        rt.settle()
        assert len(seen) == count
    finally:
        admin.stop()
        rt.shutdown()


def test_agents_and_sessions_show_spend_against_the_caps(admin_rt, scripted):
    rt, admin = admin_rt
    agent = rt.create_agent("capped", conversation_mode="allowlist", conversation_allowlist=["alice"],
                            max_budget_usd=0.05, max_total_budget_usd=1.0)
    rt.create_agent("free")
    scripted.reply("Hi.", cost_usd=0.03)
    started = command(admin, "start", agent="capped", prompt="hello", source="chat", participant="alice")
    rt.settle()
    by_name = {a["name"]: a for a in command(admin, "agents")}
    capped = by_name["capped"]
    assert (capped["id"], capped["conversation_mode"], capped["conversation_allowlist"]) == (
        agent.id, "allowlist", ["alice"])
    assert (capped["spend_usd"], capped["max_total_budget_usd"], capped["max_budget_usd"]) == (0.03, 1.0, 0.05)
    assert (capped["conversation_rate_limit_max"], capped["conversation_rate_limit_window_s"]) == (10, 3600.0)
    free = by_name["free"]  # the [access] defaults: anyone, no caps
    assert (free["conversation_mode"], free["spend_usd"], free["max_total_budget_usd"], free["max_budget_usd"]) == (
        "public", 0.0, None, None)
    [row] = command(admin, "sessions")
    assert (row["cost_usd"], row["budget_usd"]) == (0.03, 0.05)
    assert command(admin, "session", session=started["session"])["budget_usd"] == 0.05
    out = io.StringIO()
    show_result("agents", command(admin, "agents"), out)
    assert "0.0300/1" in out.getvalue() and "0.05" in out.getvalue()


def test_start_create_sets_who_may_talk_to_the_agent_and_its_caps(admin_rt):
    rt, admin = admin_rt
    command(admin, "start", agent="public-bot", prompt="hi", conversation_mode="private", max_budget_usd=0.5,
            max_total_budget_usd=10.0)
    access = rt.agent_access(rt.agent("public-bot").id)
    assert (access.mode, access.max_budget_usd, access.max_total_budget_usd) == ("private", 0.5, 10.0)


def test_start_create_with_a_kind_makes_a_chat_agent(admin_rt, scripted):
    # issue 35 item 1: `admin start --create --kind chat`; a chat agent's short answer is not nudged
    rt, admin = admin_rt
    scripted.reply("Sure")
    started = command(admin, "start", agent="talker", prompt="can you help?", create=True, kind="chat")
    assert started["created_agent"] is True and rt.internals.store.find_agent("talker").kind == "chat"
    assert [(a["name"], a["kind"]) for a in command(admin, "agents")] == [("talker", "chat")]
    error = failure(admin, "start", agent="talker", prompt="x", create=True, kind="task")
    assert error.code == "conflict" and "kind is 'chat', not 'task'" in error.message


def test_the_kind_option_is_on_the_command_line_and_checked_on_the_wire():
    import json

    from corvid_actors.daemon.cli import UsageError, build_parser
    from corvid_actors.daemon.protocol import parse_request

    args = build_parser().parse_args(["admin", "start", "--agent", "a", "--create", "--kind", "chat", "hi"])
    assert args.kind == "chat"
    with pytest.raises(UsageError, match="--kind"):
        build_parser().parse_args(["admin", "start", "--agent", "a", "--kind", "bot", "hi"])
    line = json.dumps({"cmd": "start", "args": {"agent": "a", "prompt": "hi", "kind": "bot"}}).encode()
    with pytest.raises(AdminError, match="kind"):
        parse_request(line)


def test_crash_is_refused_unless_fault_commands_are_allowed(admin_rt, scripted):
    rt, admin = admin_rt
    scripted.reply("hi")
    sid = command(admin, "start", agent="helper", prompt="hello")["session"]
    rt.settle()
    error = failure(admin, "crash", session=sid)
    assert error.code == "forbidden" and "allow_fault_commands" in error.message
    assert rt.is_running(sid)  # nothing happened to it


def test_crash_fails_the_running_actor_and_the_supervisor_restarts_it(sim_clock, scripted, tmp_path):
    rt, admin = make(sim_clock, scripted, tmp_path, settings=DaemonConfig(allow_fault_commands=True))
    try:
        events = []
        rt.subscribe_all(lambda sid, event: events.append(event.type))
        scripted.reply("hi")
        sid = command(admin, "start", agent="helper", prompt="hello", source="chat")["session"]
        rt.settle()
        crashed = command(admin, "crash", session=sid[:8])
        assert crashed == {"session": sid, "crashed": True}
        out = io.StringIO()
        show_result("crash", crashed, out)
        assert out.getvalue().startswith(f"crashed {sid[:8]}: the supervisor restarts it")
        rt.settle()
        assert "session_restarting" in events and events.count("error") == 1
        sim_clock.advance(10)  # the restart's backoff
        assert events.count("session_started") == 2
    finally:
        admin.stop()
        rt.shutdown()
