"""Issue 16: the SQLite file deleted or made read-only under a running daemon (a real
subprocess, driven through the admin socket): health says ``degraded`` with the reason,
sends are refused with "store unavailable", nothing is acknowledged after the fault; a
read-only file made writable again brings it back without a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from corvid_actors.daemon.client import AdminRequestFailed
from tests.e2e.test_daemon import Daemon, _health_once_free, daemons  # noqa: F401 - fixture

WAIT_S = 10.0


def _send_refused(daemon: Daemon, sid: str, text: str) -> str:
    with pytest.raises(AdminRequestFailed) as caught:
        daemon.call("send", session=sid, text=text)
    return str(caught.value)


def test_sqlite_file_deleted_under_the_daemon_degrades_health_and_refuses_sends(daemons, tmp_path):  # noqa: F811
    data_dir = tmp_path / "data"
    daemon = daemons(data_dir)
    sid = daemon.call("start", agent="a", prompt="hello")["session"]
    assert daemon.call("send", session=sid, text="before")["delivered"] is True
    assert _health_once_free(daemon)["store"] == {"ok": True}

    Path(data_dir / "corvid.db").unlink()

    health = _health_once_free(daemon)
    assert health["status"] == "degraded"
    assert health["store"]["ok"] is False and "is gone" in health["store"]["reason"]
    assert any(r.startswith("store unavailable:") for r in health["reasons"])
    assert "store unavailable" in _send_refused(daemon, sid, "after the fault")
    with pytest.raises(AdminRequestFailed, match="store unavailable"):
        daemon.call("start", agent="a", prompt="a new session")
    # still degraded (a deleted file does not come back), still answering
    assert _health_once_free(daemon)["status"] == "degraded"
    daemon.wait_log("store unavailable")


def test_sqlite_file_made_read_only_refuses_sends_until_it_is_writable_again(daemons, tmp_path):  # noqa: F811
    data_dir = tmp_path / "data"
    daemon = daemons(data_dir)
    sid = daemon.call("start", agent="a", prompt="hello")["session"]
    assert daemon.call("send", session=sid, text="before")["delivered"] is True
    db = data_dir / "corvid.db"
    mode = db.stat().st_mode
    db.chmod(0o444)
    try:
        health = _health_once_free(daemon)
        assert health["status"] == "degraded" and "read-only" in health["store"]["reason"]
        assert "store unavailable" in _send_refused(daemon, sid, "refused while read-only")
    finally:
        db.chmod(mode)
    health = _health_once_free(daemon)  # the probe finds the file writable: back, no restart
    assert health["store"] == {"ok": True}
    assert daemon.call("send", session=sid, text="after")["delivered"] is True
    detail = daemon.call("session", session=sid, messages=50)
    users = [m["content"] for m in detail["messages"] if m["role"] == "user"]
    assert "refused while read-only" not in users  # nothing acknowledged, nothing stored
    assert users[:1] == ["hello"] and "before" in users and "after" in users


# --- the root policy in the daemon: exit non-zero for the process supervisor --------------

_KILL_AN_ACTOR = """
import sys, threading
from corvid_actors.daemon import service as dm

config = dm.load_daemon_config(None, data_dir=sys.argv[1], provider="stub")
data_dir = dm.data_dir_of(config).resolve()
dm.prepare_data_dir(data_dir)
dm.configure_logging(config)
holder = {}

def ready(about):
    runtime = holder["daemon"].runtime
    session = runtime.create_session(source="web")
    runtime.start_process(session.id, "hello")
    print("SESSION " + session.id, flush=True)
    threading.Thread(target=runtime.internals.slot_pool.stop).start()  # a core actor dies mid-run

holder["daemon"] = dm.Daemon(config, data_dir, on_ready=ready)
sys.exit(holder["daemon"].run())
"""


def test_a_core_actor_dying_in_the_daemon_exits_70_with_sessions_marked_for_resume(tmp_path):
    import subprocess
    import sys

    from corvid_actors.daemon.service import EXIT_CORE_FAILURE
    from corvid_actors.db.store import Store
    from tests.e2e.test_daemon import READY_S, _env

    data_dir = tmp_path / "data"
    done = subprocess.run([sys.executable, "-c", _KILL_AN_ACTOR, str(data_dir)], env=_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=READY_S + WAIT_S)
    assert done.returncode == EXIT_CORE_FAILURE == 70, done.stderr[-3000:]
    assert "core actor failure: the slot pool actor was stopped" in done.stderr
    assert "daemon stopped after a failure (exit 70)" in done.stderr
    sid = done.stdout.split("SESSION ", 1)[1].split()[0]
    store = Store(f"sqlite:///{data_dir / 'corvid.db'}")
    try:
        row = store.get_session(sid)
    finally:
        store.close()
    assert row.status != "running" and row.restart_pending  # the next start resumes it
