"""What a session incarnation owns (BuiltSession.resources: e.g. its MCP servers) is closed when
the incarnation ends, on every path, once; and its notices follow ``session_started``."""

from __future__ import annotations

import threading

import pytest

from corvid_actors.events import SystemEvent
from corvid_actors.testing import EventRecorder, sim_runtime
from corvid_actors.tools.mcp_client import SessionTools


class Resources:
    """An extra_tools hook whose every build opens one resource that records its closing."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.closed: list[str] = []
        self.all_closed = threading.Event()

    def __call__(self, ctx) -> SessionTools:
        name = f"{ctx.session.id[:4]}#{len(self.opened) + 1}"
        self.opened.append(name)

        def close() -> None:
            self.closed.append(name)
            if len(self.closed) == len(self.opened):
                self.all_closed.set()

        return SessionTools(closers=[close], notices=[SystemEvent(subtype="resource_note", message=name)])


@pytest.fixture
def res():
    return Resources()


@pytest.fixture
def rt(sim_clock, scripted, tmp_path, res):
    runtime = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws",
                          loop_for_provider={"scripted": "direct"}, extra_tools=res)
    yield runtime
    runtime.shutdown()


def test_notices_follow_session_started(rt, res):
    recorder = EventRecorder.attach(rt)
    s = rt.create_session()
    rt.start_process(s.id, "hello there.")
    rt.settle()
    types = recorder.types(s.id)
    assert types.index("system") > types.index("session_started")
    [note] = [r.event for r in recorder.of(s.id, "system") if r.event.subtype == "resource_note"]
    assert note.message == res.opened[0]


def test_stop_closes_the_incarnations_resources(rt, res):
    s = rt.create_session()
    rt.start_process(s.id, "hello there.")
    rt.settle()
    assert res.closed == []
    rt.stop_process(s.id)
    rt.settle()
    assert res.closed == res.opened and len(res.opened) == 1


def test_a_crash_and_its_restart_close_each_incarnation_once(rt, res, scripted, sim_clock):
    scripted.crash("model server fell over")
    s = rt.create_session(source="chat")
    rt.start_process(s.id, "hello there.")
    rt.settle()
    assert res.closed == res.opened and len(res.opened) == 1  # exit 1 closed the first
    sim_clock.advance(5)  # the restart backoff
    assert len(res.opened) == 2 and res.closed == res.opened[:1]
    sim_clock.advance(300)  # idle: the second incarnation ends cleanly
    assert res.closed == res.opened


def test_shutdown_closes_every_running_incarnation(rt, res):
    for _ in range(3):
        s = rt.create_session()
        rt.start_process(s.id, "hello there.")
    rt.settle()
    rt.shutdown()
    assert sorted(res.closed) == sorted(res.opened) and len(res.opened) == 3


def test_a_build_that_fails_after_the_hooks_still_closes_what_they_opened(rt, res):
    agent = rt.create_agent("broken", permission_mode="no-such-mode")  # fails after the tools
    s = rt.create_session(agent_id=agent.id)
    recorder = EventRecorder.attach(rt)
    assert rt.start_process(s.id, "hello there.") is None
    assert res.all_closed.wait(1.0)
    rt.settle()
    assert [e.event.error_type for e in recorder.of(s.id, "error")] == ["spawn_error"]
