"""Reads on the public surface: every message of a session, session delete, the approval
mode, and one per-turn credit charge — through ``Runtime`` and its store only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corvid_actors.testing import Turn, sim_runtime


def test_messages_are_every_role_in_order_with_simulated_timestamps(runtime, scripted, sim_clock):
    s = runtime.create_session(source="web")
    scripted.for_session(s.id, Turn.reply("first answer", latency_s=30), Turn.clean_exit())
    start = sim_clock.now()
    runtime.start_process(s.id, "question one")
    runtime.clock.advance(30)
    runtime.send_message(s.id, "question two")
    runtime.settle()
    messages = runtime.internals.store.messages(s.id)
    assert [(m.role, m.content) for m in messages][:3] == [
        ("user", "question one"), ("assistant", "first answer"), ("user", "question two")]
    # the exit note the supervisor writes is a message too (role "system")
    assert messages[3].role == "system" and "Session completed" in messages[3].content
    assert len(messages) == 4
    assert [m.id for m in messages] == sorted(m.id for m in messages)
    assert messages[0].timestamp == start
    assert messages[1].timestamp == start + timedelta(seconds=30)
    assert all(m.timestamp.tzinfo is UTC for m in messages)
    assert runtime.internals.store.messages("no-such-session") == []


def test_delete_session_removes_the_row_and_its_messages(runtime, arrange):
    keep, gone = runtime.create_session(source="web"), runtime.create_session(source="web")
    for s in (keep, gone):
        runtime.start_process(s.id, f"hello {s.id}")
    runtime.settle()
    runtime.stop_process(gone.id)
    assert arrange.session_deleted(gone.id) is True
    assert runtime.internals.store.get_session(gone.id) is None
    assert runtime.internals.store.messages(gone.id) == []
    assert arrange.session_deleted(gone.id) is False
    assert [m.content for m in runtime.internals.store.messages(keep.id)][0] == f"hello {keep.id}"


def test_approval_mode_reads_what_was_set(runtime):
    assert runtime.approval_mode() == "normal"
    runtime.set_approval_mode("paused")
    assert runtime.approval_mode() == "paused"
    runtime.set_approval_mode("queued")
    assert runtime.approval_mode() == "queued"
    with pytest.raises(ValueError):
        runtime.set_approval_mode("bogus")
    assert runtime.approval_mode() == "queued"


@pytest.fixture
def credit_runtime(sim_clock, scripted, tmp_path):
    cfg = {"credits": {"credits_per_turn": 2, "low_credit_threshold": 3, "free_credits_on_first_message": 5}}
    rt = sim_runtime(sim_clock, scripted, config=cfg, with_credits=True, workspace_dir=tmp_path / "ws",
                     is_owner=lambda participant: participant == "owner")
    yield rt
    rt.shutdown()


def test_charge_turn_charges_like_the_end_of_a_turn(credit_runtime, sim_clock):
    rt = credit_runtime
    s = rt.create_session(source="chat", participant="alice")
    first = rt.charge_turn(s.id)  # opens alice's account with 5, takes 2
    assert (first.success, first.remaining, first.is_low) == (True, 3, True)
    assert rt.credit_balance("alice") == 3
    rt.charge_turn(s.id)
    refused = rt.charge_turn(s.id)  # 1 left: does not cover 2
    assert (refused.success, refused.remaining, refused.is_exhausted) == (False, 1, True)
    assert rt.credit_balance("alice") == 1
    assert rt.internals.store.get_session(s.id).credits_consumed == 4
    # not charged: a web session, an owner
    assert rt.charge_turn(rt.create_session(source="web", participant="alice").id) is None
    assert rt.charge_turn(rt.create_session(source="chat", participant="owner").id) is None
    assert rt.credit_balance("alice") == 1


def test_charge_turn_stops_a_running_session_whose_credits_run_out(credit_runtime):
    from corvid_actors.testing import EventRecorder

    rt = credit_runtime
    recorder = EventRecorder.attach(rt)
    s = rt.create_session(source="chat", participant="bob")
    rt.open_credit_account("bob")  # 5
    rt.start_process(s.id, "hi")  # the turn's own charge: 3 left
    rt.settle()
    assert rt.credit_balance("bob") == 3
    rt.charge_turn(s.id)  # 1 left
    assert rt.is_running(s.id)
    rt.charge_turn(s.id)
    rt.settle()
    assert recorder.last("error", s.id).error_type == "credits_exhausted"
    assert recorder.last("session_stopped", s.id).reason == "credits_exhausted"
    assert not rt.is_running(s.id)


def test_charge_turn_needs_credits_enabled(runtime):
    from corvid_actors.errors import ConfigError

    s = runtime.create_session(source="chat", participant="alice")
    with pytest.raises(ConfigError, match="with_credits=True"):
        runtime.charge_turn(s.id)


def test_charge_turn_of_an_unknown_session_is_not_found(credit_runtime):
    from corvid_actors.errors import NotFoundError

    with pytest.raises(NotFoundError):
        credit_runtime.charge_turn("no-such-session")


def test_timestamps_are_aware_utc_datetimes(runtime):
    s = runtime.create_session(source="web")
    runtime.start_process(s.id, "hi")
    runtime.settle()
    [user, *_] = runtime.internals.store.messages(s.id)
    assert isinstance(user.timestamp, datetime) and user.timestamp.utcoffset() == timedelta(0)
