"""Seed invariant 10: per-session timeout, the 60 s fallback, extend_timeout capped at 4×;
the direct loop's 5-minute idle exit (issue 12, items 7 and 8)."""

from __future__ import annotations

import pytest

from corvid_actors.config import Config
from corvid_actors.testing import EventRecorder, sim_runtime

MIN = 60.0


@pytest.fixture
def make_rt(sim_clock, scripted, tmp_path):
    made = []

    def make(loop="conversation", **supervisor):
        cfg = Config().replace(supervisor=supervisor) if supervisor else None
        rt = sim_runtime(sim_clock, scripted, config=cfg, workspace_dir=tmp_path / "workspace",
                         loop_for_provider={"scripted": loop})
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.shutdown()


def test_session_inactive_for_30_min_is_stopped_with_reason_timeout(runtime, scripted, recorder, web_session):
    scripted.reply("stuck", latency_s=10_000)  # a model call that never comes back
    runtime.start_process(web_session.id, "hi")
    runtime.clock.advance(30 * MIN - 1)
    assert runtime.is_running(web_session.id)
    runtime.clock.advance(1)
    assert not runtime.is_running(web_session.id)
    assert recorder.last("session_stopped", web_session.id).reason == "timeout"
    assert runtime.internals.store.get_session(web_session.id).status == "stopped"


def test_activity_pushes_the_timeout_back(runtime, scripted, recorder, web_session):
    scripted.reply("first", latency_s=20 * MIN)
    scripted.reply("second", latency_s=10_000)
    runtime.start_process(web_session.id, "hi")
    runtime.clock.advance(20 * MIN)  # the reply is activity
    runtime.send_message(web_session.id, "more")
    runtime.clock.advance(29 * MIN)
    assert runtime.is_running(web_session.id)
    runtime.clock.advance(1 * MIN)
    assert recorder.last("session_stopped", web_session.id).reason == "timeout"
    assert recorder.times("session_stopped", web_session.id) == [50 * MIN]


def test_extend_timeout_is_capped_at_four_times_the_default(runtime, scripted, recorder, web_session):
    assert runtime.extend_timeout(web_session.id, 60) is False  # not running
    scripted.reply("stuck", latency_s=100_000)
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    assert runtime.extend_timeout(web_session.id, 10 * 3600) is True  # asks for 10 h
    runtime.settle()
    assert runtime.session_info(web_session.id)[web_session.id]["timeout_s"] == 4 * 30 * MIN
    runtime.clock.advance(120 * MIN - 1)
    assert runtime.is_running(web_session.id)
    runtime.clock.advance(1)
    assert recorder.last("session_stopped", web_session.id).reason == "timeout"
    assert recorder.times("session_stopped", web_session.id) == [120 * MIN]


def test_extend_timeout_replaces_the_pending_deadline_instead_of_adding(runtime, scripted, recorder,
                                                                        web_session):
    scripted.reply("stuck", latency_s=100_000)  # no event after the start
    runtime.start_process(web_session.id, "hi")
    runtime.clock.advance(5 * MIN)
    assert runtime.extend_timeout(web_session.id, 10 * MIN) is True  # deadline now 15 min, not 40
    runtime.settle()
    assert runtime.session_info(web_session.id)[web_session.id]["timeout_s"] == 10 * MIN
    runtime.clock.advance(10 * MIN - 1)
    assert runtime.is_running(web_session.id)
    runtime.clock.advance(1)
    assert recorder.times("session_stopped", web_session.id) == [15 * MIN]
    assert recorder.last("session_stopped", web_session.id).reason == "timeout"


def test_the_next_event_after_an_extension_re_arms_the_default_timeout(runtime, scripted, recorder,
                                                                       web_session):
    runtime.start_process(web_session.id, "hi")  # replies at once, then waits for a message
    runtime.clock.advance(10 * MIN)
    assert runtime.extend_timeout(web_session.id, 2 * 3600) is True  # deadline: 130 min
    runtime.clock.advance(10 * MIN)
    runtime.send_message(web_session.id, "more")  # an event at 20 min: deadline 20 + 30 min
    runtime.clock.advance(30 * MIN - 1)
    assert runtime.is_running(web_session.id)
    runtime.clock.advance(1)
    assert recorder.times("session_stopped", web_session.id) == [50 * MIN]
    assert recorder.last("session_stopped", web_session.id).reason == "timeout"


def test_direct_loop_session_waiting_5_min_for_a_message_exits_cleanly(make_rt):
    rt = make_rt("direct")
    recorder = EventRecorder.attach(rt)
    session = rt.create_session(source="web")
    rt.start_process(session.id, "hi")
    rt.settle()
    rt.clock.advance(5 * MIN - 1)
    assert rt.is_running(session.id)
    rt.clock.advance(1)
    assert not rt.is_running(session.id)
    exited = recorder.last("session_exited", session.id)
    assert (exited.code, recorder.times("session_exited", session.id)) == (0, [5 * MIN])
    row = rt.internals.store.get_session(session.id)
    assert (row.status, row.pid) == ("idle", None)
    assert rt.internals.store.recent_messages(session.id, 1, roles=("system",))[0][1].startswith(
        "Session completed after 300s")


@pytest.mark.parametrize("loop", ["sdk", "conversation"])
def test_sdk_and_conversation_sessions_wait_for_a_message_until_the_inactivity_timeout(make_rt,
                                                                                        loop):
    rt = make_rt(loop)
    recorder = EventRecorder.attach(rt)
    session = rt.create_session(source="web")
    rt.start_process(session.id, "hi")
    rt.settle()
    rt.clock.advance(5 * MIN)
    assert rt.is_running(session.id)  # no idle exit
    assert recorder.of(session.id, "session_exited") == []
    rt.clock.advance(25 * MIN - 1)
    assert rt.is_running(session.id)
    rt.clock.advance(1)
    assert not rt.is_running(session.id)
    assert recorder.times("session_stopped", session.id) == [30 * MIN]
    assert recorder.last("session_stopped", session.id).reason == "timeout"
    assert recorder.of(session.id, "session_exited") == []


def test_idle_exit_is_configured_per_loop(make_rt):
    rt = make_rt("conversation", idle_exit_loops=["conversation"], session_idle_timeout_s=120.0)
    recorder = EventRecorder.attach(rt)
    session = rt.create_session(source="web")
    rt.start_process(session.id, "hi")
    rt.clock.advance(2 * MIN)
    assert recorder.times("session_exited", session.id) == [2 * MIN]
    direct = make_rt("direct", idle_exit_loops=[])
    EventRecorder.attach(direct)
    session = direct.create_session(source="web")
    direct.start_process(session.id, "hi")
    direct.clock.advance(10 * MIN)
    assert direct.is_running(session.id)  # the direct loop without an idle exit


def test_fallback_check_runs_every_60_s_only_while_sessions_run(runtime, scripted, web_session):
    stats = runtime.get_memory_stats()
    assert stats["timers"] == 0  # nothing running: no housekeeping timers at all
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    assert runtime.get_memory_stats()["timers"] >= 3  # fallback, prune, session timers
    runtime.stop_process(web_session.id)
    runtime.clock.advance(10 * MIN)
    assert runtime.get_memory_stats()["timers"] == 0
