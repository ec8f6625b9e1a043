"""Process trees on Linux, read from /proc: find a child we started, kill what is left of it.

A stdio MCP server is started in its own session (``start_new_session``), so everything
it spawns shares its session id unless it calls ``setsid`` itself; killing the members of
that session reaches descendants that outlived their parent or left its process group.
Without /proc (not Linux) these find nothing and kill nothing.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from pathlib import Path


def _stat(pid: str) -> tuple[str, int, int] | None:
    """(state, ppid, session id) of a process, from /proc/PID/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may hold spaces and parens
    return fields[0], int(fields[1]), int(fields[3])


def _pids() -> list[str]:
    try:
        return [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def find_child_with_marker(variable: str, marker: str) -> int | None:
    """The pid of our child process started with ``variable=marker`` in its environment."""
    needle = f"{variable}={marker}".encode()
    me = os.getpid()
    for pid in _pids():
        info = _stat(pid)
        if info is None or info[1] != me:
            continue
        with contextlib.suppress(OSError):
            if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return int(pid)
    return None


def session_members(leader: int) -> list[int]:
    """Live (not zombie) processes of the session ``leader`` started (stdio servers get their
    own session: the ``mcp`` client spawns them with ``start_new_session``)."""
    members = []
    for pid in _pids():
        info = _stat(pid)
        if info is not None and info[2] == leader and info[0] != "Z":
            members.append(int(pid))
    return members


def kill_session_tree(leader: int | None, wait_s: float = 0.0) -> None:
    """SIGKILL what is left of a server's process tree (after the ``mcp`` shutdown ran) and,
    given ``wait_s``, wait at most that long (pidfds, no polling) until each member is gone.

    SIGKILL is only queued: a process dies when it is next scheduled, and on its way out it
    first drops its memory (its /proc environ reads empty, so :func:`kill_marked` no longer
    recognises it) and only then becomes a zombie. Without the wait, a caller that promises
    "gone on return" could return while a member is still in that window.
    """
    if leader is None:
        return
    members = session_members(leader)
    fds = _pidfds(members) if wait_s > 0 else []
    try:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signal.SIGKILL)
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _wait_exited(fds, wait_s)
    finally:
        for fd in fds:
            os.close(fd)


def _pidfds(pids: list[int]) -> list[int]:
    """pidfds of those ``pids`` still running (none where pidfd_open is missing)."""
    if not hasattr(os, "pidfd_open"):
        return []
    fds = []
    for pid in pids:
        with contextlib.suppress(OSError):
            fds.append(os.pidfd_open(pid))
    return fds


def _wait_exited(fds: list[int], wait_s: float) -> None:
    """Wait until every pidfd's process has exited, each wait bounded by ``wait_s``."""
    pending = list(fds)
    while pending:
        # a pidfd is readable once its process has exited (no clock read, no sleep)
        ready, _, _ = select.select(pending, [], [], wait_s)
        if not ready:
            return
        pending = [fd for fd in pending if fd not in ready]


def kill_marked(variable: str, marker: str, wait_s: float) -> list[int]:
    """SIGKILL every process started with ``variable=marker`` in its environment — wherever
    it went (``setsid``, a sandbox's PID namespace: the host still sees it) — and wait, at
    most ``wait_s`` and without polling (pidfds), until they are gone. Returns the pids
    that were killed. An OS sandbox's init dies this way, and its whole namespace with it.
    """
    needle = f"{variable}={marker}".encode()
    me = os.getpid()
    fds: list[int] = []
    killed: list[int] = []
    for pid in _pids():
        if int(pid) == me:
            continue
        with contextlib.suppress(OSError):
            if needle not in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                continue
            fd = os.pidfd_open(int(pid)) if hasattr(os, "pidfd_open") else None
            os.kill(int(pid), signal.SIGKILL)
            killed.append(int(pid))
            if fd is not None:
                fds.append(fd)
    try:
        _wait_exited(fds, wait_s)
    finally:
        for fd in fds:
            os.close(fd)
    return killed
