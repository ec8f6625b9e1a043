"""Issue 16: the AdminActor under store faults — a command the store refuses fails with
"store unavailable" for that operator only; the actor keeps answering; health says
``degraded`` with the store's reason while it lasts."""

from __future__ import annotations

import pytest

from corvid_actors.errors import StoreUnavailableError
from corvid_actors.testing import StoreFault
from tests.daemon.test_admin_actor import admin_rt, command  # noqa: F401 - fixture

WAIT_S = 10


def test_a_start_the_store_refuses_fails_alone_and_the_admin_goes_on(admin_rt):  # noqa: F811
    rt, admin = admin_rt
    with StoreFault(rt, "create_session") as fault:
        with pytest.raises(StoreUnavailableError, match="store unavailable"):
            command(admin, "start", agent="helper", prompt="hello", create=True)
        assert fault.raised == 1
    assert rt.internals.store.list_sessions() == []  # nothing half-made
    started = command(admin, "start", agent="helper", prompt="hello", create=True)
    rt.settle()
    assert [row["id"] for row in command(admin, "sessions")] == [started["session"]]
    assert admin.is_alive()


def test_a_send_the_store_refuses_is_not_delivered(admin_rt):  # noqa: F811
    rt, admin = admin_rt
    sid = command(admin, "start", agent="helper", prompt="hello", create=True)["session"]
    rt.settle()
    with StoreFault(rt, "append_message"), pytest.raises(StoreUnavailableError):
        command(admin, "send", session=sid, text="refused")
    assert command(admin, "send", session=sid, text="accepted")["delivered"] is True
    rt.settle()
    users = [m["content"] for m in command(admin, "session", session=sid, messages=20)["messages"]
             if m["role"] == "user"]
    assert users == ["hello", "accepted"]


def health(admin) -> dict:
    return command(admin, "health").get(timeout=WAIT_S)


def test_health_is_degraded_with_the_reason_while_the_sqlite_file_is_read_only(sim_clock, scripted, tmp_path):
    from corvid_actors.actors.admin import AdminActor, AdminWiring, Ready
    from corvid_actors.testing import sim_runtime

    path = tmp_path / "c.db"
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws", store_url=f"sqlite:///{path}")
    admin = AdminActor.start(rt.internals.tracker, AdminWiring(
        supervisor=rt.internals.supervisor, approvals=rt.internals.approvals, bus=rt.internals.bus, timers=rt.internals.timers, slot_pool=rt.internals.slot_pool,
        credits=rt.internals.credits, store=rt.internals.store, providers=rt.internals.providers, clock=rt.clock))
    try:
        assert admin.ask(Ready()) is True
        sid = command(admin, "start", agent="helper", prompt="hello")["session"]
        rt.settle()
        assert health(admin)["status"] == "ok"
        path.chmod(0o444)
        report = health(admin)
        assert report["status"] == "degraded" and report["store"]["ok"] is False
        assert "read-only" in report["store"]["reason"]
        assert report["reasons"] == [f"store unavailable: {report['store']['reason']}"]
        with pytest.raises(StoreUnavailableError):
            command(admin, "send", session=sid, text="refused")
        path.chmod(0o644)
        assert health(admin)["status"] == "ok"
        assert command(admin, "send", session=sid, text="accepted")["delivered"] is True
    finally:
        path.chmod(0o644)
        admin.stop()
        rt.shutdown()


def test_sessions_while_the_store_is_down_lists_what_runs_here_as_the_local_view(admin_rt, scripted):  # noqa: F811
    import io

    from corvid_actors.daemon.render import show_sessions

    rt, admin = admin_rt
    scripted.reply("Hi there.")
    sid = command(admin, "start", agent="helper", prompt="hello", create=True)["session"]
    rt.settle()
    rt.clock.advance(3)
    with StoreFault(rt, "list_sessions", times=None) as fault:
        local = command(admin, "sessions")
        assert fault.raised == 1
        assert local["view"] == "local" and local["warning"]["code"] == "unavailable"
        assert local["warning"]["message"].startswith("store unavailable: injected fault")
        [line] = local["sessions"]
        assert (line["id"], line["status"], line["here"], line["agent"], line["turns"]) == (
            sid, "running", True, "helper", 1)
        assert line["uptime_s"] == 3.0 and "owner" not in line  # one daemon: no owner column
        assert command(admin, "sessions", status="paused")["sessions"] == []
        shown = io.StringIO()
        show_sessions(local, shown)
        assert shown.getvalue().startswith("LOCAL VIEW [unavailable]: store unavailable: injected fault")
        assert sid[:8] in shown.getvalue() and "helper" in shown.getvalue()
    assert [row["id"] for row in command(admin, "sessions")] == [sid]  # the store is back: its rows
