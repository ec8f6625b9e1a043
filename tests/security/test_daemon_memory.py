"""The daemon's memory and initial environment are closed to same-uid processes
(``prctl(PR_SET_DUMPABLE, 0)`` at start-up, issue 13 item 5)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.security.as_user import setpriv_argv, unprivileged_env

PROBE = textwrap.dedent("""
    import os, subprocess
    from corvid_actors.daemon.service import _dumpable, forbid_memory_access

    def peek():
        # another process of the same uid reads this one's initial environment
        seen = subprocess.run(["/bin/cat", f"/proc/{os.getpid()}/environ"], capture_output=True)
        return "read" if b"CORVID_TEST_SECRET=s3cret" in seen.stdout else "unreadable"

    print(_dumpable(), peek(), flush=True)
    print(forbid_memory_access(), _dumpable(), peek(), flush=True)
""")


def test_after_start_up_a_same_uid_process_cannot_read_the_environ():
    argv = [os.path.realpath(sys.executable), "-s", "-c", PROBE]
    if os.geteuid() == 0:
        # root may read anything: run the daemon side and the reader as one ordinary user,
        # on a copy of the package it can read wherever the checkout lies
        argv = [*setpriv_argv(), *argv]
    env = unprivileged_env(CORVID_TEST_SECRET="s3cret")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                          cwd=env["PYTHONPATH"])
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines == ["True read", "True False unreadable"], (done.stdout, done.stderr[-500:])
