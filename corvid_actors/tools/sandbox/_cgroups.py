"""pids cgroups that bound a root daemon's sandboxed processes (the kernel does not apply
``RLIMIT_NPROC`` to uid 0).

A session incarnation's commands share one cgroup (:class:`SessionCgroup`), made at its
first command and removed when the incarnation's resources are closed; in a v1 hierarchy
its commands are born inside it (a per-command join cost 5-12 ms, see the class). Its
``pids.max`` bounds the session's commands together. A launch without a session (an MCP server, ``Runtime.run_tool``, a
context built by hand) gets a cgroup of its own, removed when it ends.

Names are ``corvid-sbx-<daemon pid>-<random>``: a daemon sweeps the ones a dead process
left at start, and removes its own at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import select
import signal
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

_T = TypeVar("_T")

#: pids cgroups made for sandboxes: corvid-sbx-<daemon pid>-<random>
CGROUP_PREFIX = "corvid-sbx-"
#: how long closing a session's cgroup waits, per round, for what is left in it to exit:
#: a sandbox's init is still on its way out for a few ms after the command returned
#: (bwrap reports the exit status before its init is gone)
RELEASE_WAIT_S = 1.0
#: rounds of kill-wait-remove before a busy cgroup is left to the next :meth:`reap`
RELEASE_ROUNDS = 3


class PidsCgroups:
    """Makes and removes the pids cgroups of one :class:`Sandbox` (root only).

    ``root`` is None when no pids hierarchy under ``roots`` is writable (then no cgroup
    is ever made). Thread-safe: any worker may make or release one.
    """

    def __init__(self, roots: Sequence[str], max_processes: int) -> None:
        self.max_processes = max_processes
        self._stale: list[str] = []
        self._lock = threading.Lock()
        self.root = _writable_root(roots)
        if self.root is not None:
            self._sweep_dead()
            atexit.register(self.reap)

    def _sweep_dead(self) -> None:
        """Remove the cgroups a dead process left (its pid is in their name)."""
        assert self.root is not None
        with contextlib.suppress(OSError):
            for name in os.listdir(self.root):
                parts = name.split("-")
                if name.startswith(CGROUP_PREFIX) and len(parts) == 4 and parts[2].isdigit() \
                        and not os.path.exists(f"/proc/{parts[2]}"):
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(self.root, name))

    def new(self) -> str | None:
        """A fresh cgroup whose ``pids.max`` is ``max_processes`` (None: none could be made)."""
        if self.root is None:
            return None
        self.reap()
        path = os.path.join(self.root, f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}")
        try:
            os.mkdir(path)
            with open(os.path.join(path, "pids.max"), "w") as handle:
                handle.write(str(self.max_processes))
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return None
        return path

    def release(self, path: str) -> None:
        """Remove ``path`` now, or at the next :meth:`reap` if processes still hold it."""
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:  # the namespace's last processes are still being reaped
            with self._lock:
                self._stale.append(path)

    def release_now(self, path: str) -> None:
        """Remove ``path``, first killing what is left in it and waiting (bounded, on
        pidfds: no polling) until it is gone; still busy: left to :meth:`reap`. Blocks:
        for a closer's worker, not a command's."""
        for _ in range(RELEASE_ROUNDS):
            try:
                os.rmdir(path)
                return
            except FileNotFoundError:
                return
            except OSError:
                _kill_and_wait(os.path.join(path, "cgroup.procs"), RELEASE_WAIT_S)
        self.release(path)

    def reap(self) -> None:
        """Try again to remove the cgroups that were busy when released."""
        with self._lock:
            stale, self._stale = self._stale, []
        for path in stale:
            if os.path.isdir(path):
                self.release(path)

    def session(self) -> SessionCgroup:
        """The cgroup of one session incarnation (made at its first command)."""
        return SessionCgroup(self)


class SessionCgroup:
    """One session incarnation's pids cgroup: :meth:`path` makes it on first use and
    :meth:`close` removes it (a closer of the incarnation's resources). Thread-safe.

    Joining a cgroup (a write to ``cgroup.procs``) waits for an RCU grace period, several
    ms — most of what a cgroup cost per command. In a v1 hierarchy, where threads of one
    process may sit in different cgroups, a thread of the daemon joins the session's
    cgroup once (:class:`_Spawner`) and starts its commands: they are born inside it.
    """

    def __init__(self, cgroups: PidsCgroups) -> None:
        self._cgroups = cgroups
        self._lock = threading.Lock()
        self._path: str | None = None
        self._spawner: _Spawner | None = None
        self._closed = False

    def path(self) -> str | None:
        """The cgroup, made now if needed; None when closed or none can be made (the
        command then gets a cgroup of its own)."""
        with self._lock:
            if self._path is None and not self._closed:
                self._path = self._cgroups.new()
                tasks = os.path.join(self._path, "tasks") if self._path else ""
                if tasks and os.path.exists(tasks):  # v1: a thread may join on its own
                    self._spawner = _Spawner(tasks, _own_tasks_file(self._cgroups.root or ""))
            return self._path

    @property
    def spawns_inside(self) -> bool:
        """Whether :meth:`spawn` starts processes inside the cgroup (no join needed)."""
        spawner = self._spawner
        return spawner is not None and spawner.joined

    def spawn(self, start: Callable[[], _T]) -> _T:
        """``start()`` (a ``Popen``) on the thread inside the cgroup when there is one,
        else here; its result, or what it raised."""
        spawner = self._spawner
        if spawner is None or not spawner.joined:
            return start()
        return spawner.call(start)

    def close(self) -> None:
        """Remove the cgroup (idempotent; what still runs in it is killed: the incarnation
        has ended); later commands get one of their own. May block up to a few seconds."""
        with self._lock:
            path, self._path, self._closed = self._path, None, True
            spawner, self._spawner = self._spawner, None
        if spawner is not None:
            spawner.stop()  # its thread leaves the cgroup as it ends
        if path is not None:
            self._cgroups.release_now(path)


class _Spawner:
    """A daemon thread that joined a v1 cgroup (``tasks``) and runs start-up calls on
    request: a process it forks is born in the cgroup. On :meth:`stop` it moves back to
    ``home`` (the ``tasks`` file of the cgroup it came from) before it ends: a Python
    thread that has been joined may still be exiting in the kernel, and a cgroup holding
    it cannot be removed."""

    def __init__(self, tasks: str, home: str | None) -> None:
        self._tasks = tasks
        self._home = home
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ready = threading.Event()
        self.joined = False
        self._thread = threading.Thread(target=self._run, name="sandbox-spawner", daemon=True)
        self._thread.start()
        self._ready.wait()  # one write to ``tasks``: a grace period at most

    def _run(self) -> None:
        try:
            with open(self._tasks, "w") as handle:
                handle.write(str(threading.get_native_id()))
            self.joined = True
        except OSError:
            pass  # spawn() then starts processes on the caller's thread
        self._ready.set()
        while True:
            request = self._requests.get()
            if request is None:
                if self.joined and self._home is not None:
                    with contextlib.suppress(OSError):
                        with open(self._home, "w") as handle:
                            handle.write(str(threading.get_native_id()))
                return
            start, box, done = request
            try:
                box.append((start(), None))
            except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                box.append((None, exc))
            done.set()

    def call(self, start: Callable[[], _T]) -> _T:
        box: list[tuple[Any, BaseException | None]] = []
        done = threading.Event()
        self._requests.put((start, box, done))
        done.wait()  # bounded by ``start`` itself: a fork and exec
        result, error = box[0]
        if error is not None:
            raise error
        return cast(_T, result)

    def stop(self) -> None:
        self._requests.put(None)
        self._thread.join()


def _own_tasks_file(root: str) -> str | None:
    """The ``tasks`` file of the pids cgroup this thread is in now, below ``root`` (the
    hierarchy's mount point), or None when it cannot be told."""
    try:
        with open("/proc/thread-self/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            tasks = os.path.join(root, path.lstrip("/"), "tasks")
            return tasks if os.path.exists(tasks) else None
    return None


def _writable_root(roots: Sequence[str]) -> str | None:
    for root in roots:
        probe = os.path.join(root, f"corvid-probe-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(probe)
        except OSError:
            continue
        usable = os.path.exists(os.path.join(probe, "pids.max"))
        with contextlib.suppress(OSError):
            os.rmdir(probe)
        if usable:
            return root
    return None


def _kill_and_wait(procs: str, wait_s: float) -> None:
    """SIGKILL the processes listed in ``procs`` and wait, at most ``wait_s`` and without
    polling, until each has exited (a pidfd is readable then)."""
    try:
        with open(procs) as handle:
            # never this process: a thread of it (a spawner) may sit in the cgroup
            pids = [int(line) for line in handle if line.strip() and int(line) != os.getpid()]
    except (OSError, ValueError):
        return
    fds: list[int] = []
    try:
        for pid in pids:
            with contextlib.suppress(OSError):
                fds.append(os.pidfd_open(pid))
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        pending = fds
        while pending:
            ready, _, _ = select.select(pending, [], [], wait_s)
            if not ready:
                return
            pending = [fd for fd in pending if fd not in ready]
    finally:
        for fd in fds:
            os.close(fd)
