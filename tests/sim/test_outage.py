"""Seed scenario: an API outage pauses the session and auto-resumes it after a health probe."""

from __future__ import annotations

MIN = 60.0


def _delete_row(runtime, session_id):
    """Delete a session's row and messages as an operator's SQL (or a retention job) would."""
    m = runtime.internals.store.m
    with runtime.internals.store.transaction():
        m.SessionMessage.delete().where(m.SessionMessage.session == session_id).execute()
        m.Session.delete().where(m.Session.id == session_id).execute()


def test_outage_pauses_without_counting_as_restart_and_resumes_after_5_min(runtime, scripted, recorder,
                                                                          chat_session):
    scripted.outage("connection refused")
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    assert runtime.is_paused(chat_session.id)
    assert runtime.get_paused_session_ids() == [chat_session.id]
    assert not runtime.is_running(chat_session.id)
    row = runtime.internals.store.get_session(chat_session.id)
    assert (row.status, row.pid) == ("paused", None)
    error = recorder.last("error", chat_session.id)
    assert error.error_type == "api_outage"
    assert recorder.of(chat_session.id, "session_restarting") == []
    runtime.clock.advance(5 * MIN - 1)
    assert scripted.health_probes == 0 and runtime.is_paused(chat_session.id)
    runtime.clock.advance(1)
    assert scripted.health_probes == 1
    assert runtime.is_running(chat_session.id)
    assert not runtime.is_paused(chat_session.id)
    assert recorder.times("session_resumed", chat_session.id) == [5 * MIN]
    # resumed through the resume path: the model sees the interrupted conversation
    assert "<conversation_history>" in scripted.requests[-1].messages[-1].content
    assert runtime.session_info(chat_session.id)[chat_session.id]["restarts"] == 0


def test_pause_error_says_session_paused_and_names_the_real_next_delay(runtime, scripted, recorder,
                                                                        chat_session):
    scripted.outage("connection refused")
    scripted.outage("connection refused")  # the resumed session hits it again
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    runtime.clock.advance(5 * MIN)  # resume 1 → outage again: the next wait is 15 min
    assert [(r.at, r.event.message) for r in recorder.of(chat_session.id, "error")] == [
        (0.0, "Session paused due to API outage — auto-resume in 5min"),
        (5 * MIN, "Session paused due to API outage — auto-resume in 15min"),
    ]
    assert [r.event.attempt for r in recorder.of(chat_session.id, "session_paused")] == [1, 2]


def test_ten_resumes_back_off_5_15_45_60_then_given_up_at_the_next_due_check(runtime, scripted, recorder,
                                                                            chat_session):
    for _ in range(11):
        scripted.outage("503 service unavailable")  # every incarnation hits the outage
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    runtime.clock.advance(10 * 3600)
    resumed = recorder.times("session_resumed", chat_session.id)
    gaps = [b - a for a, b in zip([0.0, *resumed], resumed, strict=False)]
    assert gaps == [5 * MIN, 15 * MIN, 45 * MIN] + [60 * MIN] * 7  # 10 resumes, 10 probes
    assert scripted.health_probes == 10
    # the 10th resume hits the outage at once: paused again, not given up yet …
    paused_after_tenth = recorder.of(chat_session.id, "error")[-2]
    assert (paused_after_tenth.at, paused_after_tenth.event.error_type) == (resumed[-1], "api_outage")
    assert paused_after_tenth.event.message == "Session paused due to API outage — auto-resume in 60min"
    # … given up at that pause's due check, 60 min later, without another probe
    given_up = recorder.of(chat_session.id, "error")[-1]
    assert (given_up.at, given_up.event.error_type, given_up.event.message) == (
        resumed[-1] + 60 * MIN, "auto_resume_exhausted", "Auto-resume abandoned after 10 attempts")
    assert runtime.internals.store.get_session(chat_session.id).status == "error"
    assert not runtime.is_paused(chat_session.id)
    assert runtime.get_memory_stats()["timers"] <= 2  # only the housekeeping ones, if any


def test_failed_probes_do_not_consume_attempts_and_are_retried_every_60_s(runtime, scripted, recorder,
                                                                          chat_session):
    scripted.health_results = [False] * 30 + [True]  # down for 30 more probes
    scripted.outage()
    scripted.outage()  # the resumed session hits the outage once more
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    probes = []
    for _ in range(40):
        before = scripted.health_probes
        runtime.clock.advance(MIN if probes else 5 * MIN)
        if scripted.health_probes != before:
            probes.append(runtime.clock.elapsed)
        if recorder.of(chat_session.id, "session_resumed"):
            break
    # first probe when due (5 min), then one a minute while the API stays down
    assert probes == [(5 + n) * MIN for n in range(31)]
    assert recorder.times("session_resumed", chat_session.id) == [35 * MIN]  # at the 31st probe
    # 30 failed probes were no attempts: the second pause waits 15 min (one resume made)
    assert runtime.is_paused(chat_session.id)
    assert [r.event.message for r in recorder.of(chat_session.id, "error")] == [
        "Session paused due to API outage — auto-resume in 5min",
        "Session paused due to API outage — auto-resume in 15min",
    ]


def test_failed_probe_then_healthy_probe_resumes_one_check_interval_later(runtime, scripted, recorder,
                                                                          chat_session):
    scripted.health_results = [False, True]
    scripted.outage()
    runtime.start_process(chat_session.id, "hi")
    runtime.clock.advance(5 * MIN)
    assert runtime.is_paused(chat_session.id) and scripted.health_probes == 1
    runtime.clock.advance(MIN - 1)
    assert runtime.is_paused(chat_session.id)
    runtime.clock.advance(1)
    assert runtime.is_running(chat_session.id)
    assert recorder.times("session_resumed", chat_session.id) == [6 * MIN]


def test_resume_session_of_a_paused_session_whose_row_was_deleted_returns_false(runtime, scripted,
                                                                                 chat_session):
    scripted.outage()
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    assert runtime.is_paused(chat_session.id)
    _delete_row(runtime, chat_session.id)
    assert runtime.resume_session(chat_session.id) is False
    assert not runtime.is_paused(chat_session.id)
    assert runtime.get_paused_session_ids() == []
    runtime.clock.advance(10 * MIN)
    assert scripted.health_probes == 0  # the auto-resume went with the paused record
    assert runtime.get_memory_stats()["paused_sessions"] == 0


def test_auto_resume_of_a_paused_session_whose_row_was_deleted_drops_it(runtime, scripted, chat_session):
    scripted.outage()
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    _delete_row(runtime, chat_session.id)
    runtime.clock.advance(5 * MIN)
    assert not runtime.is_paused(chat_session.id) and not runtime.is_running(chat_session.id)
    assert scripted.health_probes == 0
    assert runtime.get_memory_stats()["paused_sessions"] == 0


def test_backoff_continues_across_repeated_outages_until_a_successful_turn(runtime, scripted, recorder,
                                                                          chat_session):
    scripted.outage()
    scripted.outage()  # the resumed session hits the outage again
    runtime.start_process(chat_session.id, "hi")
    runtime.clock.advance(5 * MIN)  # attempt 1: healthy → resumed → outage again
    assert runtime.is_paused(chat_session.id)
    runtime.clock.advance(15 * MIN - 1)
    assert runtime.is_paused(chat_session.id)
    runtime.clock.advance(1)  # attempt 2 at +15 min, not +5 min again
    assert runtime.is_running(chat_session.id)
    assert recorder.times("session_resumed", chat_session.id) == [5 * MIN, 20 * MIN]


def test_manual_resume_session(runtime, scripted, recorder, chat_session, web_session):
    assert runtime.resume_session(web_session.id) is False  # not paused
    scripted.outage()
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    assert runtime.resume_session(chat_session.id) is True
    runtime.settle()
    assert runtime.is_running(chat_session.id)
    assert recorder.last("session_resumed", chat_session.id).automatic is False
    runtime.clock.advance(10 * MIN)  # the cancelled auto-resume timer does nothing
    assert scripted.health_probes == 0


def test_stop_of_a_paused_session_cancels_auto_resume(runtime, scripted, chat_session):
    scripted.outage()
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    runtime.stop_process(chat_session.id)
    runtime.clock.advance(60 * MIN)
    assert scripted.health_probes == 0
    assert not runtime.is_paused(chat_session.id)
    assert runtime.internals.store.get_session(chat_session.id).status == "stopped"


def test_an_outage_pause_removes_the_sessions_subscribers_after_telling_them(runtime, scripted, recorder,
                                                                              chat_session):
    # issue 34 item 7: the original's pause removes the session's subscribers (after its
    # events); global subscribers stay; a resumed session's subscribers subscribe again
    seen = []
    runtime.subscribe(chat_session.id, lambda sid, ev: seen.append(ev.type))
    scripted.outage("connection refused")
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    assert runtime.is_paused(chat_session.id)
    assert seen[-2:] == ["error", "session_paused"]  # the pause was told before the removal
    stats = runtime.get_memory_stats()
    assert (stats["subscribers"], stats["global_subscribers"]) == (0, 1)  # the recorder stays
    told = len(seen)
    runtime.clock.advance(5 * MIN)
    assert runtime.is_running(chat_session.id)
    assert len(seen) == told  # the resumed session's events reach only who subscribes again
    assert recorder.times("session_resumed", chat_session.id) == [5 * MIN]
    again = []
    runtime.subscribe(chat_session.id, lambda sid, ev: again.append(ev.type))
    runtime.send_message(chat_session.id, "are you back?")
    runtime.settle()
    assert "result" in again
