"""The launcher: bwrap command lines, masks, hidden paths, limits and pids cgroups."""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from corvid_actors.tools.paths import DEFAULT_PROTECTED_PATTERNS, is_within
from corvid_actors.tools.sandbox._cgroups import PidsCgroups, SessionCgroup
from corvid_actors.tools.sandbox._landlock import confine_argv, landlock_rules
from corvid_actors.tools.sandbox._probe import (
    SandboxSettings,
    SandboxStatus,
    SandboxUnavailable,
    isolation_flags,
    sandbox_status,
)
from corvid_actors.tools.sandbox._scan import ProjectScan
from corvid_actors.tools.sandbox._settle import scan_before_command, settle_after_command

_T = TypeVar("_T")

#: the launcher of the runtime building a session, while its ``extra_tools`` hooks run
#: (the MCP hook starts its servers through it; None outside a build)
current_sandbox: contextvars.ContextVar[Sandbox | None] = contextvars.ContextVar(
    "corvid_current_sandbox", default=None)


class _Blanks:
    """An empty read-only file and directory on the host, bound over masked paths."""

    _lock = threading.Lock()
    _instance: _Blanks | None = None

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="corvid-sandbox-")
        self.file = os.path.join(self.dir, "empty")
        self.empty_dir = os.path.join(self.dir, "empty.d")
        Path(self.file).touch()
        os.mkdir(self.empty_dir)
        os.chmod(self.file, 0o444)
        os.chmod(self.empty_dir, 0o555)
        atexit.register(self.remove)

    @classmethod
    def get(cls) -> _Blanks:
        with cls._lock:
            if cls._instance is None or not os.path.exists(cls._instance.file):
                cls._instance = cls()
            return cls._instance

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.chmod(self.empty_dir, 0o755)
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Launch:
    """One sandboxed program: its argv, and what to clean up after it."""

    argv: list[str]
    scan: ProjectScan | None = None
    cgroup: str | None = None
    notes: list[str] = field(default_factory=list)
    #: the Landlock backend's private temporary directory (its ``/tmp`` and ``$HOME``)
    private_dir: str | None = None
    #: how to start the program (``start(lambda: Popen(argv, ...))``): the session
    #: cgroup's thread when it has one (see ``_cgroups.SessionCgroup``), else the caller
    spawn: Callable[[Callable[[], Any]], Any] | None = None

    def start(self, popen: Callable[[], _T]) -> _T:
        """Run ``popen`` (which starts :attr:`argv`) where the program must be born."""
        return self.spawn(popen) if self.spawn is not None else popen()

    def finish(self, sandbox: Sandbox, patterns: Sequence[str]) -> list[str]:
        """After the program ended: settle the project (``_settle``: protected files it
        moved are put back, those it made removed) and remove the cgroup; returns the
        lines to add to the tool's result (empty when there is nothing to say)."""
        notes: list[str] = []
        if self.scan is not None:
            notes = settle_after_command(self.scan, patterns, sandbox.settings).notes()
        if self.cgroup is not None:
            sandbox.release_cgroup(self.cgroup)
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)
        return notes


class Sandbox:
    """Builds bwrap command lines for one runtime (see the module docstring)."""

    def __init__(self, settings: SandboxSettings = SandboxSettings(),  # noqa: B008 - frozen
                 *, hidden_paths: Iterable[str] = (), status: SandboxStatus | None = None,
                 patterns: Sequence[str] = ()) -> None:
        self.settings = settings
        #: protected-path patterns masked when a caller gives none (empty: the built-in list)
        self.patterns = tuple(patterns) or DEFAULT_PROTECTED_PATTERNS
        self.status = status if status is not None else sandbox_status(settings)
        home = os.path.expanduser("~")
        hidden = ["/tmp", "/var/tmp", home, os.environ.get("XDG_RUNTIME_DIR", ""),
                  *hidden_paths, *settings.hidden_paths]
        self.hidden = tuple(dict.fromkeys(
            os.path.realpath(os.path.expanduser(p)) for p in hidden if p and p != "/"))
        # the daemon's own Python stays runnable (a pyenv or venv under $HOME holds no
        # secret, and Python MCP servers and project scripts need it); only paths inside a
        # hidden one need a bind of their own
        shown = [*settings.visible_paths, sys.base_prefix, sys.prefix]
        self.visible = tuple(dict.fromkeys(
            real for real in (os.path.realpath(os.path.expanduser(p)) for p in shown if p)
            if any(is_within(real, h) for h in self.hidden) and os.path.exists(real)))
        self._prlimit = shutil.which("prlimit")
        self.cgroups = PidsCgroups(
            settings.pids_cgroup_roots if self.status.active and os.geteuid() == 0 else (),
            settings.max_processes)

    @property
    def active(self) -> bool:
        return self.status.active

    def network_choice(self, permission_mode: str, agent_name: str = "") -> str:
        """``none`` or ``host``: the network ``[tools.sandbox]`` gives sandboxed commands
        of this mode and agent (``network``, then ``network_agents``)."""
        if agent_name and agent_name in self.settings.network_agents:
            return "host"
        return self.settings.network_of(permission_mode or "default")

    def network_for(self, permission_mode: str, agent_name: str = "") -> bool:
        """Whether commands of this mode and agent get the host network."""
        return self.network_choice(permission_mode, agent_name) == "host"

    def network_label(self, permission_mode: str, agent_name: str = "") -> str:
        """What an approval prompt says of a command's network: ``none``, ``host``, or
        ``host (no sandbox)`` when commands run unconfined (``mode`` ``auto`` without bwrap)."""
        if not self.active:
            return "host (no sandbox)"
        return self.network_choice(permission_mode, agent_name)

    # -- cgroups (root only: the kernel does not apply RLIMIT_NPROC to uid 0) --

    @property
    def _cgroup_root(self) -> str | None:
        return self.cgroups.root

    def session_cgroup(self) -> SessionCgroup | None:
        """The pids cgroup a session incarnation's commands share (None: no cgroup is
        made here, the daemon is not root or none is writable). Close it with the
        incarnation (``SessionCgroup.close``); see ``_cgroups``."""
        return self.cgroups.session() if self.cgroups.root is not None else None

    def release_cgroup(self, path: str) -> None:
        self.cgroups.release(path)

    # -- command lines --

    def _limits(self) -> list[str]:
        if self._prlimit is None:
            return []
        s = self.settings
        return [self._prlimit, f"--nproc={s.max_processes}", f"--cpu={s.cpu_seconds}",
                f"--fsize={s.max_file_bytes}", f"--as={s.max_address_space_bytes}", "--"]

    def wrap(self, argv: Sequence[str], *, project_dir: str | None, network: bool,
             patterns: Sequence[str] = (), writable_project: bool = True,
             readable_files: Sequence[str] = (), cgroup: SessionCgroup | None = None) -> Launch:
        """The bwrap command line running ``argv`` confined (see the module docstring).

        ``project_dir`` (real path) is bound read-write (read-only when not
        ``writable_project``) and is the working directory; None: no project, the
        working directory is a private ``/tmp``. Raises :class:`SandboxUnavailable`
        when the sandbox is not active (the caller decides what ``mode`` allows). The caller
        must start the command line in a new session (``start_new_session=True``).
        ``readable_files``: files an operator named (an MCP server's program and script) that
        stay readable, one by one, when they lie under a hidden path such as ``/tmp``.
        ``cgroup``: the session's pids cgroup (:meth:`session_cgroup`) the program joins;
        None: as root, one of its own, removed by :meth:`Launch.finish`.
        """
        if not self.status.active:
            raise SandboxUnavailable(f"the OS sandbox is not available: {self.status.reason}")
        root = os.path.realpath(project_dir) if project_dir else None
        patterns = tuple(patterns) or self.patterns
        scan = scan_before_command(root, patterns, self.settings) if root else None
        if self.status.backend == "landlock":
            return self._wrap_landlock(argv, root, scan, network, writable_project,
                                       readable_files, cgroup)
        blanks = _Blanks.get()
        # no --new-session: callers start the launcher in a session of its own, without a
        # controlling terminal (run_command and the mcp client both do), so there is no
        # terminal to inject input into (TIOCSTI); bwrap's setsid added ~15 ms per command
        # namespaces, every capability dropped, no nested user namespace: the flags the
        # probe checked (a command that could remount would undo every mount below)
        flags = self.status.flags or isolation_flags(self.status.binary)
        args = [self.status.binary, *flags, "--ro-bind", "/", "/"]
        if not network:
            args.append("--unshare-net")
        # hidden paths below the project are mounted over after it; the project itself,
        # or one of its ancestors, is hidden first and the project bound back in
        inside = [h for h in self.hidden if root and is_within(h, root) and h != root]
        outside = [h for h in self.hidden if h not in inside and os.path.isdir(h)]
        # a hidden path inside another hidden path is already gone (its mount point too)
        outside = [h for h in sorted(outside, key=len)
                   if not any(o != h and is_within(h, o) for o in outside)]
        mounted = [*outside, *(h for h in inside if os.path.isdir(h))]
        sizes = tmpfs_sizes(mounted, self.settings.tmpfs_max_bytes)
        for path in outside:
            args += [*self._size(sizes[path]), "--tmpfs", path]
        for real in self.visible:
            args += ["--ro-bind", real, real]
        for real in dict.fromkeys(os.path.realpath(f) for f in readable_files):
            if os.path.isfile(real) and any(is_within(real, h) for h in self.hidden) \
                    and not any(is_within(real, v) for v in self.visible):
                args += ["--ro-bind", real, real]
        args += ["--proc", "/proc", "--dev", "/dev"]
        if root and scan is not None:
            args += ["--bind" if writable_project else "--ro-bind", root, root]
            for git in scan.git_dirs:
                args += ["--ro-bind", git, git]
            for path in scan.masked_files:
                args += ["--ro-bind", blanks.file, path]
            for path in scan.masked_dirs:
                args += ["--ro-bind", blanks.empty_dir, path]
            for path in inside:
                if os.path.isdir(path):
                    args += [*self._size(sizes[path]), "--tmpfs", path]
            args += ["--chdir", root]
        else:
            args += ["--chdir", "/tmp"]
        command = [*args, "--", *self._limits(), *argv]
        return self._in_cgroup(command, scan, cgroup)

    def _in_cgroup(self, command: list[str], scan: ProjectScan | None,
                   cgroup: SessionCgroup | None, private_dir: str | None = None) -> Launch:
        """``command`` started inside the session's pids cgroup (``cgroup``), else one of
        its own when this daemon makes pids cgroups (root), else as it is."""
        shared = cgroup.path() if cgroup is not None else None
        own = self.cgroups.new() if shared is None else None
        if cgroup is not None and shared and cgroup.spawns_inside:
            # started by the session's thread inside its cgroup: born there (no join)
            return Launch(command, scan, None, spawn=cgroup.spawn, private_dir=private_dir)
        if shared or own:
            # join the cgroup before the sandbox starts, so every process it makes counts
            procs = os.path.join(shared or own or "", "cgroup.procs")
            command = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *command]
        return Launch(command, scan, own, private_dir=private_dir)

    def _wrap_landlock(self, argv: Sequence[str], root: str | None, scan: ProjectScan | None,
                       network: bool, writable_project: bool,
                       readable_files: Sequence[str], cgroup: SessionCgroup | None) -> Launch:
        """The Landlock backend's command line (``_landlock.py``, ``_confine.py``)."""
        private = tempfile.mkdtemp(prefix="corvid-sbx-tmp-")
        shown = [*self.visible, *(real for real in dict.fromkeys(
            os.path.realpath(f) for f in readable_files) if os.path.isfile(real))]
        s = self.settings
        try:
            rules = landlock_rules(
                hidden=self.hidden, shown=shown, root=root, writable_project=writable_project,
                protected=[*scan.masked_files, *scan.masked_dirs] if scan else [],
                git_dirs=scan.git_dirs if scan else [], private_dir=private)
            command = confine_argv(
                argv, rules=rules, network=network,
                limits={"nproc": s.max_processes, "cpu": s.cpu_seconds,
                        "fsize": s.max_file_bytes, "as": s.max_address_space_bytes},
                env={"TMPDIR": private, "HOME": private})
        except (OSError, ValueError) as exc:
            shutil.rmtree(private, ignore_errors=True)
            raise SandboxUnavailable(str(exc)) from exc
        return self._in_cgroup(command, scan, cgroup, private)

    def _size(self, size: int) -> list[str]:
        return ["--size", str(size)] if self.status.sized_tmpfs else []


def tmpfs_sizes(paths: Sequence[str], total: int) -> dict[str, int]:
    """Each private tmpfs's size, ``total`` bytes in all: ``/tmp`` (the scratch space
    programs use) gets half, the others share the rest equally; ``/tmp`` alone gets it all."""
    others = [p for p in paths if p != "/tmp"]
    if not others:
        return {p: total for p in paths}
    tmp = total // 2 if "/tmp" in paths else 0
    share = max((total - tmp) // len(others), 1)
    return {p: (tmp if p == "/tmp" else share) for p in paths}
