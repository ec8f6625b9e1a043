"""Operating the daemon: a real ``serve`` process, driven through the real CLI (issue 38)."""

from __future__ import annotations

from tests.e2e.test_daemon import WAIT_S, Daemon, daemons  # noqa: F401 - the fixture


def test_a_clean_shutdown_logs_no_warning(daemons, tmp_path, capsys):  # noqa: F811
    daemon = daemons(tmp_path / "data", reply="hello")
    code, out, _ = daemon.cli(capsys, "admin", "shutdown", "--wait")
    assert code == 0 and "stopped" in out
    assert daemon.wait_exit(WAIT_S) == 0
    log = daemon.lines[next(i for i, line in enumerate(daemon.lines) if "shutting down" in line):]
    assert any("daemon stopped cleanly" in line for line in log), "".join(log)
    assert not [line for line in log if "WARNING" in line or "ERROR" in line], "".join(log)
