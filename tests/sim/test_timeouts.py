"""Seed invariant 10: per-session timeout, the 60 s fallback, extend_timeout capped at 4×."""

from __future__ import annotations

MIN = 60.0


def test_session_inactive_for_30_min_is_stopped_with_reason_timeout(runtime, scripted, recorder, web_session):
    scripted.reply("stuck", latency_s=10_000)  # a model call that never comes back
    runtime.start_process(web_session.id, "hi")
    runtime.clock.advance(30 * MIN - 1)
    assert runtime.is_running(web_session.id)
    runtime.clock.advance(1)
    assert not runtime.is_running(web_session.id)
    assert recorder.last("session_stopped", web_session.id).reason == "timeout"
    assert runtime.store.get_session(web_session.id).status == "stopped"


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


def test_extend_timeout_adds_time_capped_at_four_times_the_default(runtime, scripted, recorder, web_session):
    assert runtime.extend_timeout(web_session.id, 60) is False  # not running
    scripted.reply("stuck", latency_s=100_000)
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    assert runtime.extend_timeout(web_session.id, 10 * 3600) is True  # asks for +10 h
    runtime.settle()
    assert runtime.session_info(web_session.id)[web_session.id]["timeout_s"] == 4 * 30 * MIN
    runtime.clock.advance(120 * MIN - 1)
    assert runtime.is_running(web_session.id)
    runtime.clock.advance(1)
    assert recorder.last("session_stopped", web_session.id).reason == "timeout"


def test_fallback_check_runs_every_60_s_only_while_sessions_run(runtime, scripted, web_session):
    stats = runtime.get_memory_stats()
    assert stats["timers"] == 0  # nothing running: no housekeeping timers at all
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    assert runtime.get_memory_stats()["timers"] >= 3  # fallback, prune, session timers
    runtime.stop_process(web_session.id)
    runtime.clock.advance(10 * MIN)
    assert runtime.get_memory_stats()["timers"] == 0
