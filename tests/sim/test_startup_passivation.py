"""A start-up resume registers the sessions that only waited for their user as passivated
(issue 37, items 4 and 5): no build, no actor, no thread; what an observer sees at the
resume is unchanged; the next message reactivates and answers; a session with work to
do starts for real; their timers keep their meaning; passivation off keeps the old way.
And the work per resumed session is O(1): its statements do not grow with N."""

from __future__ import annotations

from collections import Counter

import pykka
import pytest

from corvid_actors.actors.session import SessionActor
from corvid_actors.testing import EventRecorder, sim_runtime
from corvid_actors.testing.arrangement import arrange as arrange_for

MIN = 60.0


@pytest.fixture
def make_rt(sim_clock, scripted, tmp_path):
    made = []

    def make(loop="sdk", passivate_after_s=60.0, dispatcher=None):
        rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / f"ws{len(made)}",
                         loop_for_provider={"scripted": loop}, dispatcher=dispatcher,
                         config={"session": {"passivate_after_s": passivate_after_s}})
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.shutdown()


def actors_of(rt, session_ids) -> list[pykka.ActorRef]:
    wanted = set(session_ids)
    return [ref for ref in pykka.ActorRegistry.get_by_class(SessionActor)
            if getattr(ref._actor_weakref(), "sid", None) in wanted and ref.is_alive()]  # noqa: SLF001


def marked(rt, n: int, *, unanswered: int = 0) -> list[str]:
    """``n`` sessions with a short conversation, left ``running`` with a pid and marked for
    resume as a dead daemon leaves them; the first ``unanswered`` end on the user's message."""
    store = rt.internals.store
    ids = []
    for i in range(n):
        sid = rt.create_session(source="web", name=f"s{i}").id
        store.append_message(sid, "user", f"question {i}")
        if i >= unanswered:
            store.append_message(sid, "assistant", f"answer {i}")
        store.update_session(sid, status="running", pid=900000 + i, total_turns=1)
        ids.append(sid)
    arrange_for(rt).marked_for_resume(*ids)
    return ids


def passivated(rt, sid: str) -> bool:
    return rt.session_info(sid)[sid]["passivated"]


def test_waiting_sessions_come_back_passivated_without_a_build_or_an_actor(make_rt, scripted):
    rt = make_rt()
    ids = marked(rt, 6)
    rt.resume_pending_sessions()
    rt.settle()
    assert scripted.starts == []  # nothing was built
    assert actors_of(rt, ids) == []
    assert rt.get_memory_stats()["processes"] == 0
    assert all(passivated(rt, sid) and rt.is_running(sid) for sid in ids)
    assert sorted(rt.get_active_session_ids()) == sorted(ids)
    rows = [rt.internals.store.get_session(sid) for sid in ids]
    assert {(r.status, r.restart_pending, r.open_turns, r.total_turns) for r in rows} == {("running", False, 0, 1)}
    assert len({r.pid for r in rows}) == 6 and not {r.pid for r in rows} & set(range(900000, 900006))
    assert scripted.requests == []


def test_the_next_message_reactivates_and_answers_with_the_history(make_rt, scripted):
    rt = make_rt()
    recorder = EventRecorder.attach(rt)
    sid = marked(rt, 1)[0]
    rt.resume_pending_sessions()
    rt.settle()
    pid = rt.session_info(sid)[sid]["pid"]
    scripted.reply("welcome back")
    assert rt.send_message(sid, "second question") is True
    rt.settle()
    assert scripted.starts == [sid]  # built once, by the message
    requests = scripted.requests_for(sid)
    assert len(requests) == 1
    assert "question 0" in str(requests[0].messages) and "answer 0" in str(requests[0].messages)
    assert rt.internals.store.messages(sid)[-1].content == "welcome back"
    assert len(recorder.times("session_started", sid)) == 1  # the resume's; the reactivation is quiet
    info = rt.session_info(sid)[sid]
    assert (info["passivated"], info["pid"], info["turns"]) == (False, pid, 2)


def test_a_session_with_an_unanswered_request_resumes_for_real(make_rt, scripted):
    rt = make_rt()
    ids = marked(rt, 3, unanswered=1)
    scripted.reply("late answer")
    rt.resume_pending_sessions()
    rt.settle()
    assert scripted.starts == [ids[0]]
    assert rt.internals.store.messages(ids[0])[-1].content == "late answer"
    assert [r.session_id for r in scripted.requests] == [ids[0]]
    assert not passivated(rt, ids[0]) and len(actors_of(rt, ids[:1])) == 1
    assert passivated(rt, ids[1]) and passivated(rt, ids[2])


def test_the_events_at_resume_are_those_of_a_ready_start(make_rt, scripted):
    seen = {}
    for after in (60.0, 0.0):
        rt = make_rt(passivate_after_s=after)
        recorder = EventRecorder.attach(rt)
        sid = marked(rt, 1)[0]
        rt.resume_pending_sessions()
        rt.settle()
        events = recorder.of(sid)
        seen[after] = [(e.type, getattr(e, "subtype", None), getattr(e, "thinking", None)) for e in events]
        started = recorder.last("session_started", sid)
        assert started.pid == rt.session_info(sid)[sid]["pid"]
        rt.shutdown()
    assert seen[60.0] == seen[0.0]
    assert [t for t, _, _ in seen[60.0]] == ["session_started", "system", "thinking"]


def test_inactivity_timeout_of_a_session_passivated_at_start_up(make_rt, scripted):
    rt = make_rt()
    recorder = EventRecorder.attach(rt)
    sid = marked(rt, 1)[0]
    rt.resume_pending_sessions()
    rt.settle()
    rt.clock.advance(30 * MIN - 1)
    assert rt.is_running(sid)
    rt.clock.advance(1)
    rt.settle()
    assert not rt.is_running(sid)
    assert recorder.last("session_stopped", sid).reason == "timeout"
    assert rt.internals.store.get_session(sid).status == "stopped"


def test_idle_exit_of_a_direct_session_passivated_at_start_up(make_rt, scripted):
    rt = make_rt("direct")
    recorder = EventRecorder.attach(rt)
    sid = marked(rt, 1)[0]
    rt.resume_pending_sessions()
    rt.settle()
    assert passivated(rt, sid) and scripted.starts == []
    rt.clock.advance(5 * MIN - 1)
    assert rt.is_running(sid)
    rt.clock.advance(1)
    rt.settle()
    exited = recorder.last("session_exited", sid)
    assert (exited.code, recorder.times("session_exited", sid)) == (0, [5 * MIN])
    row = rt.internals.store.get_session(sid)
    assert (row.status, row.pid) == ("idle", None)
    assert not rt.is_running(sid)


def test_passivation_off_starts_every_session_as_before(make_rt, scripted):
    rt = make_rt(passivate_after_s=0.0)
    ids = marked(rt, 3)
    rt.resume_pending_sessions()
    rt.settle()
    assert sorted(scripted.starts) == sorted(ids)
    assert len(actors_of(rt, ids)) == 3
    assert not any(passivated(rt, sid) for sid in ids)
    assert scripted.requests == []  # ready, waiting for their user


def test_a_session_whose_project_is_gone_still_reports_it(make_rt, scripted):
    rt = make_rt()
    recorder = EventRecorder.attach(rt)
    ids = marked(rt, 2)
    project = rt.create_project("p", ".")
    rt.internals.store.update_session(ids[1], project_id=project.id)
    arrange_for(rt).project_deleted(ids[1])
    rt.resume_pending_sessions()
    rt.settle()
    assert recorder.last("error", ids[1]).error_type == "not_found"
    assert rt.get_active_session_ids() == [ids[0]]


def statements_of_resume(rt) -> Counter[str]:
    statements: list[str] = []
    connection = rt.internals.store.db.connection()  # the inline dispatcher's thread is this one
    connection.set_trace_callback(statements.append)
    try:
        rt.resume_pending_sessions()
        rt.settle()
    finally:
        connection.set_trace_callback(None)
    return Counter(_kind(s) for s in statements)


def _kind(statement: str) -> str:
    words = statement.split()
    if words[0] in ("BEGIN", "SAVEPOINT"):  # a transaction's (a savepoint's name is unique)
        return "BEGIN"
    if words[0] in ("COMMIT", "RELEASE"):
        return "COMMIT"
    return " ".join(words[:4])


def test_resume_work_per_session_is_constant_in_n(make_rt):
    """Every statement kind a start-up resume runs is either once per batch or exactly a
    fixed number of times per session: nothing per session grows with N (a scan, a
    re-read of what an earlier session read)."""
    counts = {}
    for n in (4, 12, 36):
        rt = make_rt(dispatcher="inline")
        marked(rt, n)
        counts[n] = statements_of_resume(rt)
        assert rt.internals.store.sessions_by_id([]) == {}
        rt.shutdown()
    for kind in counts[36].keys() | counts[4].keys():
        a, b, c = (counts[n][kind] for n in (4, 12, 36))
        per_session = (c - b) / 24
        assert per_session == (b - a) / 8, (kind, a, b, c)  # linear in N, no faster
        assert a - 4 * per_session == b - 12 * per_session  # plus a constant
    per_session_total = sum(counts[36].values()) - sum(counts[12].values())
    assert per_session_total / 24 <= 4, counts[36]  # a handful of statements per session
