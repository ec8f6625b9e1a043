"""Issue 16: every core actor survives a bad message; writes that must happen are retried
through the timer table; a store fault refuses a send (never acknowledged-then-lost); a core
actor that dies anyway shuts the runtime down cleanly (the root policy). The timer table is
no actor (issue 18): it cannot die, and a failing timer target leaves it whole. Simulated
time."""

from __future__ import annotations

import threading

import pykka
import pytest
from loguru import logger

from corvid_actors.actors.base import TrackedActor, tell
from corvid_actors.actors.events import Publish
from corvid_actors.actors.slots import SlotStats
from corvid_actors.actors.timers import ScheduleTimer, TimerIndexCheck, TimerStats
from corvid_actors.config import Config
from corvid_actors.errors import CorvidError, RuntimeStoppedError, StoreUnavailableError
from corvid_actors.events import Thinking
from corvid_actors.providers.base import ErrorKind, ProviderError
from corvid_actors.testing import EventRecorder, StoreFault, sim_runtime
from tests.actors.recording import Inbox

WAIT_S = 10


@pytest.fixture
def credit_runtime(sim_clock, scripted, tmp_path):
    cfg = Config().replace(credits={"credits_per_turn": 1, "low_credit_threshold": 0,
                                    "free_credits_on_first_message": 0})
    rt = sim_runtime(sim_clock, scripted, config=cfg, workspace_dir=tmp_path / "ws", with_credits=True)
    rt.recorder = EventRecorder.attach(rt)
    yield rt
    rt.shutdown()


def _logged(level: str = "WARNING") -> tuple[list[str], int]:
    """Capture the runtime's log lines (a library logs nothing until its host enables it)."""
    lines: list[str] = []
    logger.enable("corvid_actors")
    sink = logger.add(lambda m: lines.append(str(m)), level=level, format="{message}")
    return lines, sink


def _unlog(sink: int) -> None:
    logger.remove(sink)
    logger.disable("corvid_actors")


# --- one bad message never kills a core actor ---------------------------------------------


def test_core_actors_survive_a_told_message_that_raises(runtime):
    class Boom:
        def __hash__(self):  # ScheduleTimer keys are hashed: this one blows up in the table
            raise RuntimeError("bad key")

    lines, sink = _logged("ERROR")
    try:
        runtime.internals.timers.tell(ScheduleTimer(Boom(), 1.0, runtime.internals.bus, "x"))
        # a subscriber-less publish of something that is not an event raises in the bus
        runtime.internals.bus.tell(Publish("s", object()))
        runtime.settle()
    finally:
        _unlog(sink)
    assert runtime.internals.timers.is_alive() and runtime.internals.bus.is_alive()
    assert runtime.internals.timers.ask(TimerStats())["timers"] == 0
    assert runtime.internals.slot_pool.ask(SlotStats())["capacity"] >= 1
    assert any("Timers could not handle ScheduleTimer" in line for line in lines)
    assert any("EventBus could not handle Publish" in line for line in lines)
    assert runtime.failure is None


def test_an_asked_message_that_raises_still_reaches_the_asker(runtime):
    class Boom:
        def __hash__(self):
            raise RuntimeError("bad key")

    with pytest.raises(RuntimeError, match="bad key"):
        runtime.internals.timers.ask(ScheduleTimer(Boom(), 1.0, runtime.internals.bus, "x"))
    assert runtime.internals.timers.is_alive()


def test_a_tell_to_a_dead_core_actor_is_logged(runtime):
    from corvid_actors.actors.base import tell

    lines, sink = _logged()
    runtime.internals.tracker.on_actor_exit = None  # this test is about the log line, not the root policy
    try:
        runtime.internals.slot_pool.stop()
        assert tell(runtime.internals.slot_pool, SlotStats()) is False
    finally:
        _unlog(sink)
    assert any("SlotStats to the dead SlotPool dropped" in line for line in lines)


def test_provider_error_is_a_corvid_error():
    assert isinstance(ProviderError(list(ErrorKind)[0], "down"), CorvidError)


# --- store faults: refused, not acknowledged; retried where the write must happen ---------


def test_a_send_the_store_refuses_raises_and_stores_nothing(runtime, scripted):
    s = runtime.create_session(source="web")
    other = runtime.create_session(source="web")
    runtime.start_process(s.id, "hello")
    runtime.start_process(other.id, "hello")
    runtime.settle()
    before = runtime.internals.store.count_messages(s.id)
    with StoreFault(runtime, "append_message", nth=1) as fault:
        with pytest.raises(StoreUnavailableError, match="store unavailable: injected fault"):
            runtime.send_message(s.id, "lost?")
        assert fault.raised == 1
        # the runtime keeps serving: the next send (another session) goes through
        assert runtime.send_message(other.id, "still here") is True
    runtime.settle()
    assert [m.content for m in runtime.internals.store.messages(s.id)].count("lost?") == 0
    assert runtime.internals.store.count_messages(s.id) == before
    assert runtime.send_message(s.id, "after the fault") is True
    runtime.settle()
    assert "after the fault" in [m.content for m in runtime.internals.store.messages(s.id)]
    assert runtime.failure is None and runtime.internals.supervisor.is_alive()


def test_a_refused_credit_charge_is_retried_through_the_timers(credit_runtime):
    rt = credit_runtime
    rt.grant_credits("alice", 10)
    rt.grant_credits("bob", 10)
    s = rt.create_session(source="chat", participant="alice")
    other = rt.create_session(source="chat", participant="bob")
    fault = StoreFault(rt, "deduct", nth=1, times=2)  # the first charge and its first retry
    rt.start_process(s.id, "one")
    rt.settle()
    assert fault.raised == 1
    assert rt.credit_balance("alice") == 10  # not charged yet
    warning = rt.recorder.first("session_error", s.id)
    assert warning is not None and warning.event.error_type == "store_unavailable"
    assert warning.event.severity == "warning"
    rt.clock.advance(1.0)  # first retry after 1 s: refused again
    rt.settle()
    assert fault.raised == 2 and rt.credit_balance("alice") == 10
    # other sessions are charged meanwhile
    rt.start_process(other.id, "hi")
    rt.settle()
    assert rt.credit_balance("bob") == 9
    rt.clock.advance(2.0)  # second retry after 2 s more: the fault is over
    rt.settle()
    assert rt.credit_balance("alice") == 9
    deductions = [t for t in rt.credit_transactions("alice") if t["type"] == "deduction"]
    assert len(deductions) == 1  # charged exactly once
    assert rt.internals.credits.is_alive() and rt.failure is None
    fault.clear()


def test_a_charge_given_up_after_every_retry_says_so(credit_runtime):
    rt = credit_runtime
    attempts = rt.config.credits.charge_retry.max_attempts  # [credits.charge_retry]: 10
    rt.grant_credits("alice", 10)
    s = rt.create_session(source="chat", participant="alice")
    with StoreFault(rt, "deduct", times=None) as fault:
        rt.start_process(s.id, "one")
        rt.settle()
        for _ in range(attempts):
            rt.clock.advance(30.0)
            rt.settle()
        assert fault.raised == attempts == 10
    errors = [r.event for r in rt.recorder.of(s.id, "error") if r.event.error_type == "store_unavailable"]
    assert len(errors) == 1 and "given up" in errors[0].message
    assert rt.credit_balance("alice") == 10
    assert rt.internals.credits.is_alive()


def test_an_asked_charge_the_store_refuses_raises_to_the_asker(credit_runtime):
    rt = credit_runtime
    rt.grant_credits("alice", 10)
    s = rt.create_session(source="chat", participant="alice")
    with StoreFault(rt, "deduct"), pytest.raises(StoreUnavailableError):
        rt.charge_turn(s.id)
    assert rt.charge_turn(s.id).remaining == 9


def test_store_fault_counts_only_its_kind_and_the_nth(runtime):
    store = runtime.internals.store
    with StoreFault(store, "update_session", nth=2) as fault:
        s = store.create_session(source="web")
        store.update_session(s.id, name="a")
        with pytest.raises(StoreUnavailableError):
            store.update_session(s.id, name="b")
        store.update_session(s.id, name="c")
        assert (fault.seen, fault.raised) == (3, 1)
    assert store.get_session(s.id).name == "c"
    with pytest.raises(ValueError):
        StoreFault(store, "update_session", nth=0)


def test_store_faults_stack_and_clear_in_any_order(runtime):
    store = runtime.internals.store
    s = store.create_session(source="web")
    below = StoreFault(store, "update_session", times=None)
    above = StoreFault(store, "get_session", times=None)
    above.clear()  # the fault below stays in force
    with pytest.raises(StoreUnavailableError):
        store.update_session(s.id, name="x")
    assert store.get_session(s.id) is not None
    below.clear()
    store.update_session(s.id, name="y")
    assert store.get_session(s.id).name == "y" and "run" not in store.__dict__


# --- the root policy ------------------------------------------------------------------------


@pytest.mark.parametrize("victim", ["bus", "slot_pool", "approvals", "store_watch"])
def test_a_core_actor_stopped_mid_run_shuts_the_runtime_down_cleanly(sim_clock, scripted, tmp_path, victim):
    # a file store: the rows are read after the failure closed the runtime's store
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws", store_url=f"sqlite:///{tmp_path}/c.db")
    heard: list[str] = []
    done = threading.Event()
    rt.add_fatal_listener(lambda failure: (heard.append(failure), done.set()))
    try:
        s = rt.create_session(source="web")
        rt.start_process(s.id, "hello")
        rt.settle()
        assert rt.internals.store.get_session(s.id).status == "running"
        getattr(rt.internals, victim).stop()
        assert done.wait(WAIT_S), "the root policy did not finish"
        assert len(heard) == 1 and "was stopped" in heard[0]
        assert rt.failure == heard[0]
        # sessions stopped and marked for resume, every actor stopped: nothing half alive
        from corvid_actors.db.store import Store

        reopened = Store(f"sqlite:///{tmp_path}/c.db")
        row = reopened.get_session(s.id)
        reopened.close()
        assert row.status != "running" and row.restart_pending
        tree = rt.internals
        for ref in (tree.supervisor, tree.bus, tree.timers, tree.slot_pool, tree.approvals, tree.store_watch):
            assert not ref.is_alive()
        with pytest.raises(RuntimeStoppedError, match="actor was stopped"):
            rt.send_message(s.id, "anyone?")
    finally:
        rt.shutdown()


def test_the_timer_table_is_not_under_the_root_policy(runtime):
    # it has no thread to lose; only actors are watched
    assert "timers" not in dict(runtime.internals.core_actors())
    assert runtime.internals.timers not in list(runtime.internals.stop_order())


def test_a_failing_timer_target_does_not_break_the_timer_table(runtime):
    """What replaces killing the Timers actor: the table cannot be stopped, but a timer's
    target can fail — raise on the timer's message (and die of it), or be dead already.
    Neither touches the table (nor the runtime): the other timers fire, new ones are taken."""

    class Fragile(TrackedActor):
        def on_receive(self, message):
            raise RuntimeError("a bug in the target")

    tracker, timers = runtime.internals.tracker, runtime.internals.timers
    fragile, dead, inbox = Fragile.start(tracker), Inbox.start(tracker), Inbox.start(tracker)
    dead.stop()
    tell(timers, ScheduleTimer(("t", "fragile"), 1.0, fragile, "boom"))
    tell(timers, ScheduleTimer(("t", "dead"), 1.0, dead, "too late"))
    tell(timers, ScheduleTimer(("t", "ok"), 2.0, inbox, "fired"))
    runtime.clock.advance(1.0)
    assert not fragile.is_alive()
    assert timers.is_alive()
    assert timers.ask(TimerIndexCheck())["by_owner"] == {"t": {("t", "ok")}}
    runtime.clock.advance(1.0)
    assert inbox.ask("dump") == ["fired"]
    tell(timers, ScheduleTimer(("t", "again"), 1.0, inbox, "again"))
    runtime.clock.advance(1.0)
    assert inbox.ask("dump") == ["fired", "again"]
    assert runtime.failure is None


def test_the_supervisor_dying_marks_running_sessions_for_resume(sim_clock, scripted, tmp_path):
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws", store_url=f"sqlite:///{tmp_path}/c.db")
    done = threading.Event()
    rt.add_fatal_listener(lambda failure: done.set())
    try:
        s = rt.create_session(source="web")
        rt.start_process(s.id, "hello")
        rt.settle()
        rt.internals.supervisor.stop()
        assert done.wait(WAIT_S)
        from corvid_actors.db.store import Store

        reopened = Store(f"sqlite:///{tmp_path}/c.db")
        row = reopened.get_session(s.id)
        reopened.close()
        assert row.status == "idle" and row.restart_pending
        assert "supervisor" in rt.failure
    finally:
        rt.shutdown()


def test_a_normal_shutdown_is_no_failure(sim_clock, scripted, tmp_path):
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws")
    heard: list[str] = []
    rt.add_fatal_listener(heard.append)
    rt.shutdown()
    assert heard == [] and rt.failure is None
    with pytest.raises(RuntimeStoppedError, match="^the runtime is shut down$"):
        rt.get_active_session_ids()


def test_watch_puts_a_host_actor_under_the_root_policy(runtime):
    from corvid_actors.actors.base import TrackedActor

    class HostActor(TrackedActor):
        def on_receive(self, message):
            return None

    done = threading.Event()
    runtime.add_fatal_listener(lambda failure: done.set())
    ref = HostActor.start(runtime.internals.tracker)
    runtime.watch(ref, "host")
    ref.stop()
    assert done.wait(WAIT_S)
    assert runtime.failure == "the host actor was stopped"


def test_a_dead_actor_ask_names_the_failure_for_pykka_callers(runtime):
    done = threading.Event()
    runtime.add_fatal_listener(lambda failure: done.set())
    runtime.internals.bus.stop()
    assert done.wait(WAIT_S)
    with pytest.raises(pykka.ActorDeadError):
        runtime.internals.bus.ask(Publish("s", Thinking()))


def recorder_types(runtime, sid):
    return {f"{r.type}:{r.event.error_type}" for r in runtime.recorder.of(sid) if hasattr(r.event, "error_type")}


def test_a_store_fault_in_a_told_supervisor_handler_does_not_kill_it(runtime, scripted, sim_clock):
    from corvid_actors.testing import Turn

    runtime.recorder = EventRecorder.attach(runtime)
    s = runtime.create_session(source="web")
    other = runtime.create_session(source="web")
    scripted.for_session(s.id, Turn.clean_exit())
    with StoreFault(runtime, "update_session", nth=2) as fault:  # #1: running; #2: the exit
        runtime.start_process(s.id, "bye")
        runtime.settle()
        assert fault.raised == 1
    assert runtime.internals.supervisor.is_alive() and runtime.failure is None
    assert not runtime.is_running(s.id)
    # the session concerned hears why (a session_error: the write is retried, not dropped)
    assert "session_error:store_error" in recorder_types(runtime, s.id)
    sim_clock.advance(2)  # the fault has cleared: the retried exit write lands
    runtime.settle()
    assert runtime.internals.store.get_session(s.id).status != "running"
    # the runtime keeps serving, and the stale row is put right
    runtime.start_process(other.id, "hello")
    runtime.settle()
    assert runtime.is_running(other.id)
    runtime.start_process(s.id, "again")
    runtime.settle()
    assert runtime.internals.store.get_session(s.id).status == "running"


def test_a_refused_assistant_write_is_retried_and_loses_nothing(runtime, scripted, sim_clock):
    recorder = EventRecorder.attach(runtime)
    s = runtime.create_session(source="web")
    other = runtime.create_session(source="web")
    runtime.start_process(s.id, "hello")
    runtime.start_process(other.id, "hello")
    runtime.settle()
    with StoreFault(runtime, "append_message", nth=2) as fault:  # #1: the user's, #2: the reply
        assert runtime.send_message(s.id, "second") is True  # acknowledged: stored
        runtime.settle()
        assert fault.raised == 1
    # the session actor's own policy: said on the session, the write kept for a retry; the
    # session and the others go on
    assert ("session_error", "store_error") in [
        (r.type, getattr(r.event, "error_type", None)) for r in recorder.of(s.id)]
    assert runtime.is_running(s.id) and runtime.is_running(other.id) and runtime.failure is None
    assert [(m.role, m.content) for m in runtime.internals.store.messages(s.id) if m.role == "user"] == [
        ("user", "hello"), ("user", "second")]
    # after the fault: the retry (1 s later) writes the reply of the acknowledged message
    sim_clock.advance(2)
    runtime.settle()
    roles = [m.role for m in runtime.internals.store.messages(s.id) if m.role in ("user", "assistant")]
    assert roles[-2:] == ["user", "assistant"]
