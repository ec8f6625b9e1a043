"""The Landlock backend's command lines: the allow-list of paths, and the wrapper's probe.

Where no namespace can be made (Docker's default seccomp profile, hardened kernels),
``_confine.py`` confines a command in its own process instead (see its docstring). Landlock
only *allows*: a rule on a directory grants its rights to everything beneath it, and
nothing can be taken back lower down. So "the host read-only except ``$HOME``, ``/tmp``
and the data directory" is built from the top: ``/`` is not granted itself, but each of
its entries is — except the hidden ones — and only a directory holding a hidden path is
descended into. The project likewise: read-write beneath each entry, except its
protected files and directories, its ``.git`` (granted read-only) and hidden paths inside
it; a directory holding one of those is only *listable* (Landlock cannot let it take new
entries without letting its protected neighbour be replaced), its other entries are
granted one by one.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from corvid_actors.tools.paths import is_within
from corvid_actors.tools.sandbox._confine import encode_spec

#: the wrapper, run by path (``python -I -S``): standard library only, nothing imported
CONFINE_SCRIPT = str(Path(__file__).with_name("_confine.py"))
#: host paths a command never sees, besides the hidden ones: ``/dev`` (raw disks are
#: readable by their owner, and root without capabilities is still their owner; other
#: processes' shared memory) — only :data:`_DEVICES` are granted
_HOST_HIDDEN = ("/dev",)
#: device files a command reads and writes (``> /dev/null``)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: the longest spec passed on the command line (one argv string holds at most 128 KiB)
_MAX_SPEC_CHARS = 120_000


def _grant(path: str, kind: str, excluded: Sequence[str], rules: list[list[str]],
           list_ancestors: bool) -> None:
    """Grant ``kind`` beneath ``path`` except beneath every ``excluded`` path: a directory
    holding an excluded path is descended into (and made listable when
    ``list_ancestors``), its other entries granted one by one. Symbolic links are not
    granted: access through one is decided at its target."""
    if path in excluded:
        return
    inside = [e for e in excluded if e != path and is_within(e, path)]
    if not inside:
        rules.append([path, kind])
        return
    if list_ancestors:
        rules.append([path, "list"])
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if not entry.is_symlink():
            _grant(entry.path, kind, inside, rules, list_ancestors)


def landlock_rules(*, hidden: Iterable[str], shown: Iterable[str], root: str | None,
                   writable_project: bool, protected: Iterable[str], git_dirs: Iterable[str],
                   private_dir: str) -> list[list[str]]:
    """The wrapper's ``rules``: (real path, kind) pairs, kinds as ``_confine.py`` reads them.

    ``hidden``: host paths never granted (``/tmp``, ``$HOME``, the data directory …);
    ``shown``: paths inside hidden ones granted read-only anyway (the daemon's Python, an
    MCP server's script); ``protected``: the project's masked files and directories.
    """
    hidden = [*hidden, *_HOST_HIDDEN]
    rules: list[list[str]] = []
    _grant("/", "ro", [*hidden, *([root] if root else [])], rules, list_ancestors=False)
    for path in shown:
        rules.append([path, "ro"])
    for device in _DEVICES:
        if os.path.exists(device):
            rules.append([device, "dev"])
    rules.append([private_dir, "rw"])
    if root:
        gits = list(git_dirs)
        inside = [h for h in hidden if is_within(h, root) and h != root]
        excluded = [*protected, *gits, *inside]
        _grant(root, "rw" if writable_project else "ro", excluded, rules, list_ancestors=True)
        for git in gits:
            if not any(is_within(git, e) for e in [*protected, *inside]):
                rules.append([git, "ro"])
    return rules


def confine_argv(argv: Sequence[str], *, rules: list[list[str]], network: bool,
                 limits: dict[str, int], env: dict[str, str]) -> list[str]:
    """The wrapper's command line running ``argv`` confined; ValueError if too large."""
    spec = encode_spec(rules, network, limits, env)
    if len(spec) > _MAX_SPEC_CHARS:
        raise ValueError(f"the Landlock rules take {len(spec)} characters (the most is "
                         f"{_MAX_SPEC_CHARS}): the project has too many protected files")
    return [_interpreter(), "-I", "-S", CONFINE_SCRIPT, spec, *argv]


@functools.cache
def _interpreter() -> str:
    """The Python that runs the wrapper: the daemon's own, unless this uid may not execute
    it (an interpreter under another user's home), then ``python3`` on PATH (the wrapper
    needs the standard library of any Python ≥ 3.9, nothing else)."""
    if sys.executable and os.access(sys.executable, os.X_OK):
        return sys.executable
    return shutil.which("python3") or sys.executable


_probe_lock = threading.Lock()
_probe_result: list[str] = []


def probe_landlock() -> str:
    """"" when the wrapper can confine a command here (Landlock, seccomp, no_new_privs:
    a real confined child is started), else why not (probed once per process)."""
    with _probe_lock:
        if _probe_result:
            return _probe_result[0]
    spec = encode_spec([["/", "ro"]], False, {}, {})
    try:
        done = subprocess.run(
            [_interpreter(), "-I", "-S", CONFINE_SCRIPT, spec, "--probe"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            timeout=10, check=False)
        reason = "" if done.returncode == 0 else (
            f"the Landlock wrapper failed ({done.returncode}): "
            f"{done.stderr.decode('utf-8', 'replace').strip()[:300]}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = f"the Landlock wrapper cannot run: {exc}"
    with _probe_lock:
        _probe_result[:] = [reason]
    return reason
