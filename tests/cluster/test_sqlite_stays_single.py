"""A SQLite store serves one daemon (issue 20, item 7): a second daemon on the same file is
refused even from another data directory, with a message that names the way to run several
(PostgreSQL and CORVID_CLUSTER=1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.test_daemon import READY_S, Daemon, _env


def test_a_second_daemon_on_the_same_sqlite_file_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    (tmp_path / "one").mkdir()
    first = Daemon(tmp_path / "one", env={"CORVID_DB_URL": url}).start()
    try:
        (tmp_path / "two").mkdir()
        second = subprocess.run(
            [sys.executable, "-m", "corvid_actors", "serve", "--data-dir", str(tmp_path / "two"),
             "--provider", "stub"],
            env={**_env(), "CORVID_DB_URL": url}, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=READY_S)
        assert second.returncode != 0
        assert f"another corvid-actors daemon (pid {first.pid}) uses the SQLite database" in second.stderr
        assert "CORVID_CLUSTER=1" in second.stderr
        assert first.proc is not None and first.proc.poll() is None  # the first one serves on
    finally:
        first.kill()
