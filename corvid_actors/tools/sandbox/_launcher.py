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
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from corvid_actors.tools.paths import DEFAULT_PROTECTED_PATTERNS, is_within
from corvid_actors.tools.sandbox._landlock import confine_argv, landlock_rules
from corvid_actors.tools.sandbox._probe import (
    SandboxSettings,
    SandboxStatus,
    SandboxUnavailable,
    sandbox_status,
)
from corvid_actors.tools.sandbox._scan import ProjectScan
from corvid_actors.tools.sandbox._settle import scan_before_command, settle_after_command

#: pids cgroups made for sandboxes: corvid-sbx-<daemon pid>-<random>
_CGROUP_PREFIX = "corvid-sbx-"

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
        self._stale_cgroups: list[str] = []
        self._cgroup_lock = threading.Lock()
        self._cgroup_root: str | None = (
            self._find_cgroup_root() if self.status.active and os.geteuid() == 0 else None)
        if self._cgroup_root is not None:
            self._sweep_dead_cgroups()
            atexit.register(self._reap_cgroups)

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

    def _find_cgroup_root(self) -> str | None:
        for root in self.settings.pids_cgroup_roots:
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

    def _sweep_dead_cgroups(self) -> None:
        """Remove the cgroups a dead process left (its pid is in their name)."""
        assert self._cgroup_root is not None
        with contextlib.suppress(OSError):
            for name in os.listdir(self._cgroup_root):
                parts = name.split("-")
                if name.startswith(_CGROUP_PREFIX) and len(parts) == 4 and parts[2].isdigit() \
                        and not os.path.exists(f"/proc/{parts[2]}"):
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(self._cgroup_root, name))

    def _new_cgroup(self) -> str | None:
        if self._cgroup_root is None:
            return None
        self._reap_cgroups()
        path = os.path.join(self._cgroup_root,
                            f"{_CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}")
        try:
            os.mkdir(path)
            with open(os.path.join(path, "pids.max"), "w") as handle:
                handle.write(str(self.settings.max_processes))
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return None
        return path

    def release_cgroup(self, path: str) -> None:
        try:
            os.rmdir(path)
        except OSError:  # the namespace's last processes are still being reaped
            with self._cgroup_lock:
                self._stale_cgroups.append(path)

    def _reap_cgroups(self) -> None:
        with self._cgroup_lock:
            stale, self._stale_cgroups = self._stale_cgroups, []
        for path in stale:
            if os.path.isdir(path):
                self.release_cgroup(path)

    # -- command lines --

    def _limits(self) -> list[str]:
        if self._prlimit is None:
            return []
        s = self.settings
        return [self._prlimit, f"--nproc={s.max_processes}", f"--cpu={s.cpu_seconds}",
                f"--fsize={s.max_file_bytes}", f"--as={s.max_address_space_bytes}", "--"]

    def wrap(self, argv: Sequence[str], *, project_dir: str | None, network: bool,
             patterns: Sequence[str] = (), writable_project: bool = True,
             readable_files: Sequence[str] = ()) -> Launch:
        """The bwrap command line running ``argv`` confined (see the module docstring).

        ``project_dir`` (real path) is bound read-write (read-only when not
        ``writable_project``) and is the working directory; None: no project, the
        working directory is a private ``/tmp``. Raises :class:`SandboxUnavailable`
        when the sandbox is not active (the caller decides what ``mode`` allows). The caller
        must start the command line in a new session (``start_new_session=True``).
        ``readable_files``: files an operator named (an MCP server's program and script) that
        stay readable, one by one, when they lie under a hidden path such as ``/tmp``.
        """
        if not self.status.active:
            raise SandboxUnavailable(f"the OS sandbox is not available: {self.status.reason}")
        root = os.path.realpath(project_dir) if project_dir else None
        patterns = tuple(patterns) or self.patterns
        scan = scan_before_command(root, patterns, self.settings) if root else None
        if self.status.backend == "landlock":
            return self._wrap_landlock(argv, root, scan, network, writable_project,
                                       readable_files)
        blanks = _Blanks.get()
        # no --new-session: callers start the launcher in a session of its own, without a
        # controlling terminal (run_command and the mcp client both do), so there is no
        # terminal to inject input into (TIOCSTI); bwrap's setsid added ~15 ms per command
        args = [self.status.binary, "--unshare-user", "--unshare-pid", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
                "--ro-bind", "/", "/"]
        if not network:
            args.append("--unshare-net")
        # hidden paths below the project are mounted over after it; the project itself,
        # or one of its ancestors, is hidden first and the project bound back in
        inside = [h for h in self.hidden if root and is_within(h, root) and h != root]
        outside = [h for h in self.hidden if h not in inside and os.path.isdir(h)]
        # a hidden path inside another hidden path is already gone (its mount point too)
        outside = [h for h in sorted(outside, key=len)
                   if not any(o != h and is_within(h, o) for o in outside)]
        for path in outside:
            args += ["--tmpfs", path]
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
                    args += ["--tmpfs", path]
            args += ["--chdir", root]
        else:
            args += ["--chdir", "/tmp"]
        cgroup = self._new_cgroup()
        command = [*args, "--", *self._limits(), *argv]
        if cgroup is not None:
            # join the cgroup before bwrap starts, so every process it makes counts
            procs = os.path.join(cgroup, "cgroup.procs")
            command = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *command]
        return Launch(command, scan, cgroup)

    def _wrap_landlock(self, argv: Sequence[str], root: str | None, scan: ProjectScan | None,
                       network: bool, writable_project: bool,
                       readable_files: Sequence[str]) -> Launch:
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
        cgroup = self._new_cgroup()
        if cgroup is not None:
            procs = os.path.join(cgroup, "cgroup.procs")
            command = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *command]
        return Launch(command, scan, cgroup, private_dir=private)
