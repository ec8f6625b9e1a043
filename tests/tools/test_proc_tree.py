"""proc_tree: killing a server's session tree returns only once its members are gone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from corvid_actors.tools.proc_tree import kill_session_tree, session_members

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_kill_session_tree_with_a_wait_returns_when_every_member_has_exited():
    # a leader in its own session that starts a grandchild and reports its pid
    script = ("import subprocess, sys; "
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
              "print(p.pid, flush=True); import time; time.sleep(30)")
    leader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              start_new_session=True, text=True)
    try:
        assert leader.stdout is not None
        grandchild = int(leader.stdout.readline())
        assert set(session_members(leader.pid)) == {leader.pid, grandchild}
        kill_session_tree(leader.pid, wait_s=5.0)
        # no polling here: the wait is the function's promise
        assert not _alive(leader.pid) and not _alive(grandchild)
        assert session_members(leader.pid) == []
    finally:
        kill_session_tree(leader.pid)
        leader.wait(5.0)
        leader.stdout.close()


def test_kill_session_tree_without_a_leader_does_nothing():
    kill_session_tree(None, wait_s=5.0)
