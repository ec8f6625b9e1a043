"""Passivated idle sessions (issue 37, item 4): after ``[session] passivate_after_s`` with no
turn in flight a session has no actor (and, threaded, no thread); its next message
reactivates it with every earlier message kept, no model call of its own and no event a
user would see; its timers, stop, extend and approvals keep their meaning."""

from __future__ import annotations

import threading

import pykka
import pytest

from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.session import SessionActor
from corvid_actors.config import Config
from corvid_actors.testing import EventRecorder, sim_runtime

MIN = 60.0
#: what a user sees of a session (the rest is bookkeeping: thinking, deltas, usage)
VISIBLE = ("session_started", "session_stopped", "session_exited", "system", "error", "session_error",
           "assistant", "result")


@pytest.fixture
def make_rt(sim_clock, scripted, tmp_path):
    made = []

    def make(loop="sdk", passivate_after_s=60.0, dispatcher=None, **supervisor):
        rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / f"ws{len(made)}",
                         loop_for_provider={"scripted": loop}, dispatcher=dispatcher,
                         config={"session": {"passivate_after_s": passivate_after_s},
                                 "supervisor": supervisor})
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.shutdown()


def actors_of(rt, session_id: str) -> list[pykka.ActorRef]:
    """The session's SessionActors alive in the actor registry (a stopped one leaves it)."""
    return [ref for ref in pykka.ActorRegistry.get_by_class(SessionActor)
            if getattr(ref._actor_weakref(), "sid", None) == session_id and ref.is_alive()]  # noqa: SLF001


def core_of(rt):
    """The supervisor's books (the race test sets its scene by hand)."""
    return rt.internals.supervisor._actor_weakref().core  # noqa: SLF001


def facts(rt, session_id: str) -> dict:
    return rt.session_info(session_id)[session_id]


def chatted(rt, scripted, text="hello", reply="hi there", cost=0.25):
    session = rt.create_session(source="web")
    scripted.reply(reply, cost_usd=cost)
    rt.start_process(session.id, text)
    rt.settle()
    return session


@pytest.mark.parametrize("loop", ["sdk", "direct"])
def test_idle_session_passivates_then_a_message_reactivates_it_with_its_history(make_rt, scripted, loop):
    calls, visible = a_second_turn(make_rt, scripted, loop)
    rt = make_rt(loop)
    recorder = EventRecorder.attach(rt)
    session = chatted(rt, scripted)
    assert actors_of(rt, session.id) and not facts(rt, session.id)["passivated"]
    rt.clock.advance(MIN - 1)
    assert actors_of(rt, session.id)  # not before passivate_after_s
    rt.clock.advance(1)
    rt.settle()
    assert actors_of(rt, session.id) == []  # no actor
    info = facts(rt, session.id)
    assert (info["running"], info["passivated"], info["turns"]) == (True, True, 1)
    assert rt.is_running(session.id) and session.id in rt.get_active_session_ids()
    assert rt.get_memory_stats()["processes"] == 0
    row = rt.internals.store.get_session(session.id)
    assert row.status == "running"
    seen_before = len(recorder.of(session.id))
    calls_before = len(scripted.requests_for(session.id))

    scripted.reply("welcome back", cost_usd=0.5)
    assert rt.send_message(session.id, "second question") is True
    rt.settle()
    # the model calls of the message's own turn, each with the message and the history:
    # reactivation made none of its own
    requests = scripted.requests_for(session.id)[calls_before:]
    assert requests and all("second question" in str(r.messages) for r in requests)
    prompt = str(requests[0].messages)
    assert "hello" in prompt and "hi there" in prompt  # the history kept
    assert len(requests) == calls
    new = [r.type for r in recorder.of(session.id)[seen_before:] if r.type in VISIBLE]
    assert "assistant" in new and new == visible  # no session_started, provider_selected, ...
    info = facts(rt, session.id)
    assert (info["passivated"], info["turns"], info["pid"]) == (False, 2, row.pid)
    assert info["cost_usd"] == pytest.approx(0.75)
    row = rt.internals.store.get_session(session.id)
    assert (row.total_turns, row.open_turns, float(row.total_cost_usd)) == (2, 0, pytest.approx(0.75))
    messages = rt.internals.store.messages(session.id)
    assert [m.content for m in messages if m.role == "user"] == ["hello", "second question"]
    assert {"hi there", "welcome back"} <= {m.content for m in messages if m.role == "assistant"}


def a_second_turn(make_rt, scripted, loop):
    """The same conversation without passivation: the model calls its second turn makes and
    the events a user sees of it."""
    rt = make_rt(loop, passivate_after_s=0.0)
    recorder = EventRecorder.attach(rt)
    session = chatted(rt, scripted)
    before, seen = len(scripted.requests_for(session.id)), len(recorder.of(session.id))
    scripted.reply("welcome back", cost_usd=0.5)
    rt.send_message(session.id, "second question")
    rt.settle()
    visible = [r.type for r in recorder.of(session.id)[seen:] if r.type in VISIBLE]
    rt.stop_process(session.id)
    return len(scripted.requests_for(session.id)) - before, visible


def test_zero_disables_passivation(make_rt, scripted):
    rt = make_rt(passivate_after_s=0.0)
    session = chatted(rt, scripted)
    rt.clock.advance(20 * MIN)
    assert actors_of(rt, session.id) and not facts(rt, session.id)["passivated"]


def test_default_is_on_and_simulations_turn_it_off():
    assert Config().session.passivate_after_s == 120.0
    assert Config().replace(session={"passivate_after_s": 0}).session.passivate_after_s == 0


def test_a_negative_setting_is_refused_naming_the_key():
    with pytest.raises(Exception, match="passivate_after_s"):
        Config().replace(session={"passivate_after_s": -1})


def test_no_passivation_mid_turn(make_rt, scripted):
    rt = make_rt()
    session = rt.create_session(source="web")
    scripted.reply("slow", latency_s=5 * MIN)
    rt.start_process(session.id, "think hard")
    rt.clock.advance(2 * MIN)
    assert actors_of(rt, session.id) and not facts(rt, session.id)["passivated"]
    rt.clock.advance(3 * MIN)  # the reply comes; a minute later it passivates
    rt.settle()
    assert actors_of(rt, session.id)
    rt.clock.advance(MIN)
    rt.settle()
    assert facts(rt, session.id)["passivated"]


def test_passivated_session_keeps_its_inactivity_timeout(make_rt, scripted):
    rt = make_rt()
    recorder = EventRecorder.attach(rt)
    session = chatted(rt, scripted)
    rt.clock.advance(2 * MIN)
    assert facts(rt, session.id)["passivated"]
    rt.clock.advance(28 * MIN - 1)
    assert rt.is_running(session.id)
    rt.clock.advance(1)
    rt.settle()
    assert not rt.is_running(session.id)
    assert recorder.times("session_stopped", session.id) == [30 * MIN]
    assert recorder.last("session_stopped", session.id).reason == "timeout"
    assert rt.internals.store.get_session(session.id).status == "stopped"


def test_passivated_direct_session_keeps_its_idle_exit(make_rt, scripted):
    rt = make_rt("direct")
    recorder = EventRecorder.attach(rt)
    session = chatted(rt, scripted)
    rt.clock.advance(2 * MIN)
    assert facts(rt, session.id)["passivated"]
    rt.clock.advance(3 * MIN)
    rt.settle()
    exited = recorder.last("session_exited", session.id)
    assert (exited.code, exited.num_turns, recorder.times("session_exited", session.id)) == (0, 1, [5 * MIN])
    row = rt.internals.store.get_session(session.id)
    assert (row.status, row.pid) == ("idle", None)
    assert rt.internals.store.recent_messages(session.id, 1, roles=("system",))[0][1].startswith(
        "Session completed after 300s")
    assert not rt.is_running(session.id)


def test_extend_timeout_moves_a_passivated_sessions_deadline(make_rt, scripted):
    rt = make_rt()
    recorder = EventRecorder.attach(rt)
    session = chatted(rt, scripted)
    rt.clock.advance(2 * MIN)
    assert rt.extend_timeout(session.id, 60 * MIN) is True
    assert facts(rt, session.id)["timeout_s"] == 60 * MIN
    rt.clock.advance(59 * MIN)
    assert rt.is_running(session.id)
    rt.clock.advance(1 * MIN)
    rt.settle()
    assert recorder.times("session_stopped", session.id) == [62 * MIN]


def test_stop_of_a_passivated_session(make_rt, scripted):
    rt = make_rt()
    recorder = EventRecorder.attach(rt)
    session = chatted(rt, scripted)
    rt.clock.advance(2 * MIN)
    rt.stop_process(session.id)
    rt.settle()
    assert recorder.last("session_stopped", session.id).reason == "user_stop"
    assert not rt.is_running(session.id) and not facts(rt, session.id)["passivated"]
    assert rt.internals.store.get_session(session.id).status == "stopped"
    assert rt.send_message(session.id, "anyone?") is False  # stopped stays stopped
    rt.clock.advance(60 * MIN)  # its timers went with it
    assert recorder.of(session.id, "session_stopped")[-1:] == recorder.of(session.id, "session_stopped")
    assert len(recorder.of(session.id, "session_stopped")) == 1


def test_restart_of_a_passivated_session_is_a_resume_that_finds_it_running(make_rt, scripted):
    rt = make_rt()
    session = chatted(rt, scripted)
    rt.clock.advance(2 * MIN)
    pid = facts(rt, session.id)["pid"]
    assert rt.resume_process(session.id) == pid  # running: nothing started, no model call
    assert len(scripted.requests_for(session.id)) == 1
    scripted.reply("restarted with history")
    rt.resume_process(session.id, "are you there")
    rt.settle()
    assert rt.internals.store.messages(session.id)[-1].content == "restarted with history"
    assert facts(rt, session.id)["turns"] == 2


def test_shutdown_marks_a_passivated_session_for_resume(make_rt, scripted):
    rt = make_rt()
    recorder = EventRecorder.attach(rt)
    session = chatted(rt, scripted)
    rt.clock.advance(2 * MIN)
    rt.stop_sessions()
    assert recorder.last("session_stopped", session.id).reason == "server_shutdown"
    assert rt.internals.store.get_session(session.id).restart_pending is True


def test_send_racing_passivation_is_not_lost(make_rt, scripted):
    """The message arrives while the supervisor handles the offer: the live entry has
    delivered one more message than the actor took, so the offer is declined."""
    rt = make_rt()
    session = chatted(rt, scripted)
    supervisor = rt.internals.supervisor
    inc = core_of(rt).running[session.id]  # noqa: SLF001 - the race is set up by hand
    from corvid_actors.actors.session_messages import WantsPassivation
    now = rt.clock.now()
    scripted.reply("answered")
    assert rt.send_message(session.id, "racing message") is True  # delivered: the actor has it
    # the offer the actor made before the message reached it: it had taken none (the
    # start's prompt is not a delivered message)
    supervisor.tell(WantsPassivation(session.id, inc.generation, 0, now, None))
    rt.settle()
    assert not facts(rt, session.id)["passivated"]
    assert rt.internals.store.messages(session.id)[-1].content == "answered"


def test_send_to_a_passivating_incarnation_goes_to_the_supervisor(make_rt, scripted):
    """Between the entry's refusal and the incarnation's end a send takes the cold path; the
    supervisor reactivates the session with it."""
    rt = make_rt()
    session = chatted(rt, scripted)
    rt.clock.advance(2 * MIN)
    scripted.reply("still here")
    assert rt.send_message(session.id, "one more") is True
    assert rt.send_message(session.id, "and another") is True
    rt.settle()
    texts = [m.content for m in rt.internals.store.messages(session.id) if m.role == "user"]
    assert texts == ["hello", "one more", "and another"]
    assert facts(rt, session.id)["turns"] == 3


def test_threaded_passivated_session_has_no_thread(make_rt, scripted):
    rt = make_rt(dispatcher="threads")
    session = chatted(rt, scripted)
    [ref] = actors_of(rt, session.id)
    before = threading.active_count()
    rt.clock.advance(2 * MIN)
    rt.settle()
    assert actors_of(rt, session.id) == [] and facts(rt, session.id)["passivated"]
    assert threading.active_count() < before
    scripted.reply("back")
    assert rt.send_message(session.id, "wake up") is True
    rt.settle()
    assert rt.internals.store.messages(session.id)[-1].content == "back"


def test_supervisor_stats_count_passivated_sessions(make_rt, scripted):
    rt = make_rt()
    sessions = [chatted(rt, scripted) for _ in range(3)]
    rt.clock.advance(2 * MIN)
    stats = rt.internals.supervisor.ask(sv.SupervisorStats())
    assert (stats["processes"], stats["passivated_sessions"]) == (0, 3)
    assert sorted(rt.get_active_session_ids()) == sorted(s.id for s in sessions)


def test_a_session_waiting_on_an_approval_is_not_passivated(make_rt, scripted):
    rt = make_rt("direct", passivate_after_s=10.0)
    agent = rt.create_agent("Alice", permission_mode="default", description="Alice the tester")
    scripted.tool_call("corvid_list_agents", {}, match="who")
    scripted.reply("Alice is here.", match="who")
    recorder = EventRecorder.attach(rt)
    session = rt.create_session(agent_id=agent.id)
    rt.start_process(session.id, "who is there?")
    rt.settle()
    [ask] = [r.event for r in recorder.of(session.id, "approval_request")]
    rt.clock.advance(40)  # four times passivate_after_s, within the approval's timeout
    rt.settle()
    assert actors_of(rt, session.id) and not facts(rt, session.id)["passivated"]
    assert [a["id"] for a in rt.list_approvals(session.id)] == [ask.id]
    rt.resolve_approval(ask.id, "allow")
    rt.settle()
    assert rt.internals.store.messages(session.id)[-1].content == "Alice is here."
    rt.clock.advance(10)  # the turn is over: now it passivates
    rt.settle()
    assert facts(rt, session.id)["passivated"] and rt.list_approvals(session.id) == []


def test_a_session_grant_outlives_passivation(make_rt, scripted):
    rt = make_rt("direct", passivate_after_s=10.0)
    agent = rt.create_agent("Alice", permission_mode="default", description="Alice the tester")
    scripted.tool_call("corvid_list_agents", {}, match="who")
    scripted.reply("Alice is here.", match="who")
    recorder = EventRecorder.attach(rt)
    session = rt.create_session(agent_id=agent.id)
    rt.start_process(session.id, "who is there?")
    rt.settle()
    [ask] = [r.event for r in recorder.of(session.id, "approval_request")]
    rt.resolve_approval(ask.id, "allow_session")
    rt.settle()
    rt.clock.advance(10)
    rt.settle()
    assert facts(rt, session.id)["passivated"]
    scripted.tool_call("corvid_list_agents", {}, match="again")
    scripted.reply("Still only Alice.", match="again")
    assert rt.send_message(session.id, "who is there again?") is True
    rt.settle()
    assert len(recorder.of(session.id, "approval_request")) == 1  # not asked a second time
    assert rt.internals.store.messages(session.id)[-1].content == "Still only Alice."
