"""Issue 16 item 1: send_message goes to a running session without the supervisor.

The message is persisted on the caller's thread and told to the incarnation through the
live registry; the supervisor is asked only on the cold path. Turn accounting is the
session actor's."""

from __future__ import annotations

import threading

import pytest

from corvid_actors.testing import EventRecorder, sim_runtime

JOIN_S = 2.0  # real seconds: a bound on waits, never expected to be reached


class _Gate:
    """Makes the builder hang for one session until opened (as an MCP server stuck at
    initialise does), on whatever thread builds it."""

    def __init__(self, builder, session_id):
        self.entered = threading.Event()
        self.open = threading.Event()
        self._build = builder.build
        self._sid = session_id
        builder.build = self

    def __call__(self, ctx):
        if ctx.session.id == self._sid:
            self.entered.set()
            assert self.open.wait(JOIN_S * 5), "the gate was never opened"
        return self._build(ctx)


def _in_thread(fn, *args):
    out = {}

    def run():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_send_reaches_a_running_session_while_the_supervisor_is_busy(runtime, scripted, recorder):
    a = runtime.create_session(source="web").id
    b = runtime.create_session(source="web").id
    runtime.start_process(a, "hi")
    runtime.settle()
    gate = _Gate(runtime.internals.builder, b)
    starter, started = _in_thread(runtime.start_process, b, "hello")
    try:
        assert gate.entered.wait(JOIN_S)
        sender, sent = _in_thread(runtime.send_message, a, "still there?")
        sender.join(JOIN_S)
        assert not sender.is_alive(), "send_message waited for the busy supervisor"
        assert sent == {"value": True}
        # acknowledged = stored, on the caller's thread
        assert [c for r, c in runtime.internals.store.recent_messages(a, 10) if r == "user"] == ["hi", "still there?"]
    finally:
        gate.open.set()
        starter.join(JOIN_S)
    assert started.get("value") is not None
    runtime.settle()
    assert [m.messages[-1].content for m in scripted.requests if m.session_id == a][-1] == "still there?"
    assert len(recorder.of(a, "result")) == 2


def test_turn_accounting_is_the_sessions_and_counts_direct_sends(runtime, scripted, recorder):
    sid = runtime.create_session(source="web").id
    runtime.start_process(sid, "one")
    runtime.settle()
    for text in ("two", "three"):
        assert runtime.send_message(sid, text) is True
        runtime.settle()
    row = runtime.internals.store.get_session(sid)
    assert (row.total_turns, row.cumulative_turns, row.open_turns) == (3, 3, 0)
    assert runtime.session_info(sid)[sid]["turns"] == 3
    runtime.stop_process(sid)
    runtime.settle()
    assert runtime.internals.store.get_session(sid).total_turns == 3
    # a new incarnation goes on counting
    runtime.resume_process(sid, "four")
    runtime.settle()
    assert runtime.internals.store.get_session(sid).total_turns == 4


def test_a_delivery_refused_after_the_lookup_cold_starts_with_the_message(runtime, scripted, recorder):
    sid = runtime.create_session(source="web").id
    runtime.start_process(sid, "hi")
    runtime.settle()
    entry = runtime.internals.live.get(sid)
    assert entry is not None and entry.generation == 1
    # the actor dies behind the supervisor's back: the registry still lists it
    entry.ref.stop(block=True)
    assert runtime.send_message(sid, "are you there?") is True  # not lost: the cold path took it
    runtime.settle()
    users = [c for r, c in runtime.internals.store.recent_messages(sid, 10) if r == "user"]
    assert users == ["hi", "are you there?"]  # stored once
    assert [r.event.generation for r in recorder.of(sid, "session_started")] == [1, 2]
    prompt = scripted.requests[-1].messages[-1].content
    assert "<conversation_history>" in prompt and prompt.rstrip().endswith("are you there?")
    assert runtime.internals.live.get(sid).generation == 2


def test_the_registry_lists_only_running_incarnations(runtime, scripted):
    sid = runtime.create_session(source="web").id
    assert runtime.internals.live.get(sid) is None
    runtime.start_process(sid, "hi")
    runtime.settle()
    assert runtime.internals.live.get(sid) is not None and len(runtime.internals.live) == 1
    runtime.stop_process(sid)
    runtime.settle()
    assert runtime.internals.live.get(sid) is None and len(runtime.internals.live) == 0
    assert runtime.send_message(sid, "hello?") is False  # not running: nothing stored
    assert [c for r, c in runtime.internals.store.recent_messages(sid, 10) if r == "user"] == ["hi"]


def test_context_reset_still_happens_on_the_direct_path(sim_clock, scripted, tmp_path):
    runtime = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "w",
                          config={"session": {"max_turns_before_context_reset": 2}})
    from corvid_actors.testing import EventRecorder

    recorder = EventRecorder.attach(runtime)
    try:
        sid = runtime.create_session(source="web").id
        runtime.start_process(sid, "one")
        runtime.settle()
        for text in ("two", "three", "four"):
            assert runtime.send_message(sid, text) is True
            runtime.settle()
        resets = [r for r in recorder.of(sid, "system") if r.event.subtype == "context_reset"]
        assert len(resets) == 1
        assert [r.event.generation for r in recorder.of(sid, "session_started")] == [1, 2]
    finally:
        runtime.shutdown()


@pytest.fixture
def threaded_runtime(sim_clock, scripted, tmp_path):
    """This test holds a build on a worker while other threads send: with the inline
    dispatcher no message runs while a worker does (see InlineDispatcher), so it needs
    actor threads."""
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "workspace", dispatcher="threads")
    yield rt
    rt.shutdown()


def test_messages_sent_while_a_session_builds_wait_for_it_in_order(threaded_runtime, scripted):
    runtime = threaded_runtime
    recorder = EventRecorder.attach(runtime)
    sid = runtime.create_session(source="web").id
    gate = _Gate(runtime.internals.builder, sid)
    starter, started = _in_thread(runtime.start_process, sid, "first")
    try:
        assert gate.entered.wait(JOIN_S)
        assert runtime.is_running(sid)  # it is there, building
        for text in ("second", "third"):
            sender, sent = _in_thread(runtime.send_message, sid, text)
            sender.join(JOIN_S)
            assert sent == {"value": True}  # accepted (stored) while it builds
        assert recorder.of(sid, "session_started") == []
    finally:
        gate.open.set()
        starter.join(JOIN_S)
    assert started["value"] == 800000
    runtime.settle()
    asked = [r.messages[-1].content for r in scripted.requests if r.session_id == sid]
    assert asked[0] == "first" and [a for a in asked if a in ("second", "third")] == ["second", "third"]
    assert runtime.internals.store.get_session(sid).total_turns == 3


def test_a_build_failure_is_a_spawn_error_and_start_replies_none(runtime, scripted, recorder):
    sid = runtime.create_session(source="web").id

    def broken(ctx):
        raise RuntimeError("no provider for you")

    runtime.internals.builder.build = broken
    assert runtime.start_process(sid, "hi") is None
    runtime.settle()
    assert [e.event.message for e in recorder.of(sid, "error")] == ["no provider for you"]
    assert recorder.last("session_error", sid).error_type == "spawn_error"
    assert not runtime.is_running(sid) and runtime.internals.live.get(sid) is None
    assert runtime.internals.store.get_session(sid).status == "error"


def test_the_fallback_never_undoes_a_stop_or_reaches_past_a_newer_incarnation(runtime, scripted, recorder):
    from corvid_actors.actors.supervisor import SendMessage

    sid = runtime.create_session(source="web").id
    runtime.start_process(sid, "hi")
    runtime.settle()
    old = runtime.internals.live.get(sid).generation
    # a stop lands between the caller's lookup and its fallback: a stop stays a stop
    runtime.stop_process(sid)
    assert runtime.internals.supervisor.ask(SendMessage(sid, "late", fallback=old)) is False
    runtime.settle()
    assert not runtime.is_running(sid)
    assert [c for r, c in runtime.internals.store.recent_messages(sid, 10) if r == "user"] == ["hi"]
    # a newer incarnation runs: the message goes to it, no cold start
    runtime.start_process(sid, "again")
    runtime.settle()
    assert runtime.internals.supervisor.ask(SendMessage(sid, "for the new one", fallback=old)) is True
    runtime.settle()
    assert [r.event.generation for r in recorder.of(sid, "session_started")] == [1, 2]
    assert scripted.requests[-1].messages[-1].content == "for the new one"
