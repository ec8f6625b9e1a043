"""Issue 16 (per-message errors of the supervisor and the session actor): a store error in
a told handler never kills the actor; the session concerned hears of it; writes that must
happen are retried with backoff through the timer table (first retry after 1 s)."""

from __future__ import annotations

from corvid_actors.db.store import Store
from corvid_actors.errors import StoreError
from corvid_actors.testing import EventRecorder, sim_runtime


class FlakyStore(Store):
    """Raises StoreError for the next ``count`` calls that ``when(name, args, kwargs)`` picks."""

    def __init__(self) -> None:
        super().__init__("sqlite:///:memory:")
        self.rules: list[list] = []
        self.raised: list[str] = []

    def fail(self, when, count=1):
        self.rules.append([when, count])

    def _check(self, name, args, kwargs):
        for rule in self.rules:
            when, count = rule
            if count and when(name, args, kwargs):
                rule[1] -= 1
                self.raised.append(name)
                raise StoreError(f"injected failure of {name}")

    def add_session_usage(self, *args, **kwargs):
        self._check("add_session_usage", args, kwargs)
        return super().add_session_usage(*args, **kwargs)

    def update_session(self, *args, **kwargs):
        self._check("update_session", args, kwargs)
        return super().update_session(*args, **kwargs)

    def append_message(self, *args, **kwargs):
        self._check("append_message", args, kwargs)
        return super().append_message(*args, **kwargs)

    def get_session(self, *args, **kwargs):
        self._check("get_session", args, kwargs)
        return super().get_session(*args, **kwargs)

    def open_turn(self, *args, **kwargs):
        self._check("open_turn", args, kwargs)
        return super().open_turn(*args, **kwargs)


def _runtime(sim_clock, scripted, tmp_path):
    store = FlakyStore()
    runtime = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "w", store=store)
    return runtime, store, EventRecorder.attach(runtime)


def _store_errors(recorder, sid):
    return [r for r in recorder.of(sid, "session_error") if r.event.error_type == "store_error"]


def test_a_failed_usage_write_is_retried_and_the_session_keeps_serving(sim_clock, scripted, tmp_path):
    runtime, store, recorder = _runtime(sim_clock, scripted, tmp_path)
    try:
        sid = runtime.create_session(source="web").id
        store.fail(lambda name, a, k: name == "add_session_usage")
        runtime.start_process(sid, "hi")
        runtime.settle()
        assert store.raised == ["add_session_usage"]
        assert len(_store_errors(recorder, sid)) == 1
        assert runtime.internals.store.get_session(sid).cumulative_turns == 0  # not yet
        assert runtime.is_running(sid)
        runtime.clock.advance(1.0)  # the first retry
        row = runtime.internals.store.get_session(sid)
        assert (row.cumulative_turns, row.open_turns) == (1, 0)
        assert runtime.send_message(sid, "again") is True
        runtime.settle()
        assert runtime.internals.store.get_session(sid).cumulative_turns == 2
    finally:
        runtime.shutdown()
        store.close()


def test_conversation_writes_stay_in_order_behind_a_failed_one(sim_clock, scripted, tmp_path):
    runtime, store, recorder = _runtime(sim_clock, scripted, tmp_path)
    scripted.default_reply = "the answer"
    try:
        sid = runtime.create_session(source="web").id
        runtime.start_process(sid, "hi")
        runtime.settle()
        # the assistant's reply cannot be written twice in a row: the store is down for 2 s
        store.fail(lambda name, a, k: name == "append_message" and a[1] == "assistant", count=2)
        assert runtime.send_message(sid, "question") is True
        runtime.settle()
        assert [r for r, _ in runtime.internals.store.recent_messages(sid, 10)][-1] == "user"
        runtime.clock.advance(1.0)  # first retry fails too
        assert [r for r, _ in runtime.internals.store.recent_messages(sid, 10)][-1] == "user"
        runtime.clock.advance(2.0)  # second retry (after 2 s) writes it
        rows = runtime.internals.store.recent_messages(sid, 10)
        assert [r for r, _ in rows if r in ("user", "assistant")] == ["user", "assistant", "user", "assistant"]
        assert len(_store_errors(recorder, sid)) == 1  # said once, not per attempt
    finally:
        runtime.shutdown()
        store.close()


def test_the_supervisor_survives_failed_exit_writes_and_keeps_the_restart_timeline(sim_clock, scripted,
                                                                                   tmp_path):
    runtime, store, recorder = _runtime(sim_clock, scripted, tmp_path)
    try:
        sid = runtime.create_session(source="chat", participant="p").id
        other = runtime.create_session(source="web").id
        scripted.crash("boom", match="hi")
        store.fail(lambda name, a, k: name == "update_session" and k.get("status") == "error")
        store.fail(lambda name, a, k: name == "append_message" and a[1] == "system")
        runtime.start_process(sid, "hi")
        runtime.clock.advance(0)
        # the exit note waits behind the failed status write (the store sees them in order)
        assert store.raised == ["update_session"]
        assert len(_store_errors(recorder, sid)) == 1
        assert recorder.last("session_restarting", sid).delay_s == 5.0
        # the supervisor is alive and serves others
        assert runtime.start_process(other, "hello") is not None
        runtime.settle()
        assert runtime.is_running(other)
        runtime.clock.advance(1.0)  # first retry: the status is written, the note fails
        assert store.raised == ["update_session", "append_message"]
        assert runtime.internals.store.get_session(sid).status == "error"
        assert [m.content for m in runtime.internals.store.messages(sid) if m.role == "system"] == []
        runtime.clock.advance(2.0)  # second retry, 2 s later: the note
        notes = [m.content for m in runtime.internals.store.messages(sid) if m.role == "system"]
        assert len(notes) == 1 and notes[0].startswith("Session exited unexpectedly (code 1)")
        runtime.clock.advance(2.0)  # the restart at +5 s, unchanged
        assert recorder.times("session_started", sid) == [0.0, 5.0]
        assert runtime.internals.store.get_session(sid).status == "running"
    finally:
        runtime.shutdown()
        store.close()


def test_a_store_error_in_a_timer_handler_does_not_kill_the_supervisor(sim_clock, scripted, tmp_path):
    runtime, store, recorder = _runtime(sim_clock, scripted, tmp_path)
    try:
        sid = runtime.create_session(source="chat", participant="p").id
        scripted.crash("boom", match="hi")
        runtime.start_process(sid, "hi")
        runtime.clock.advance(0)
        store.fail(lambda name, a, k: name == "get_session")  # the restart due at +5 s reads the row
        runtime.clock.advance(5.0)
        assert store.raised == ["get_session"]
        errors = _store_errors(recorder, sid)
        assert len(errors) == 1 and "_RestartDue" in errors[0].event.message
        assert errors[0].event.message.endswith("trying again in 5s")
        # alive: it answers; the restart is not lost, only 5 s late
        assert runtime.get_active_session_ids() == []
        runtime.clock.advance(5.0)
        assert recorder.times("session_started", sid) == [0.0, 10.0]
        assert runtime.is_running(sid)
    finally:
        runtime.shutdown()
        store.close()


def test_an_asked_request_that_hits_a_store_error_replies_with_it(sim_clock, scripted, tmp_path):
    runtime, store, recorder = _runtime(sim_clock, scripted, tmp_path)
    try:
        sid = runtime.create_session(source="web").id
        store.fail(lambda name, a, k: name == "get_session")
        try:
            runtime.stop_process(sid)
        except StoreError as exc:
            assert "injected" in str(exc)
        else:
            raise AssertionError("the asker did not get the store error")
        assert runtime.get_active_session_ids() == []  # and the supervisor lives on
    finally:
        runtime.shutdown()
        store.close()


def test_pending_writes_outlive_a_stopped_session(sim_clock, scripted, tmp_path):
    runtime, store, recorder = _runtime(sim_clock, scripted, tmp_path)
    scripted.default_reply = "the answer"
    try:
        sid = runtime.create_session(source="web").id
        runtime.start_process(sid, "hi")
        runtime.settle()
        store.fail(lambda name, a, k: name == "append_message" and a[1] == "assistant", count=2)
        assert runtime.send_message(sid, "question") is True
        runtime.settle()
        runtime.stop_process(sid)  # before the session's retry: it hands the write over
        runtime.settle()
        assert store.raised == ["append_message", "append_message"]  # the supervisor tried at once
        assert [r for r, _ in runtime.internals.store.recent_messages(sid, 10)] == ["user", "assistant", "user"]
        runtime.clock.advance(1.0)  # the supervisor's retry
        assert [c for r, c in runtime.internals.store.recent_messages(sid, 10)] == ["hi", "the answer", "question",
                                                                          "the answer"]
    finally:
        runtime.shutdown()
        store.close()
