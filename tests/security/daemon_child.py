"""The daemon side of a security test, run in a process of its own as another uid.

Started by ``tests.security.as_user`` through ``setpriv`` with a readable copy of the
package on ``PYTHONPATH``: it builds the same :class:`ToolContext` a session builds (the
coding tools, the allowlisted environment, the OS sandbox over the project, the daemon's
data directory hidden) and answers one JSON request a line on stdin with one JSON reply a
line on stdout, until stdin closes. Standard library and ``corvid_actors`` only.

With ``"no_userns": true`` in its spec, the child first installs a seccomp filter that
refuses namespaces the way Docker's default profile does (:func:`refuse_namespaces`), so
bwrap cannot build a sandbox in it and ``backend = "auto"`` must fall back to Landlock.

A request is ``{"tool": NAME, "args": {...}}``; the reply ``{"output": str, "is_error":
bool}``, or ``{"raised": "Type: message"}`` when the handler raised. The first line the
child prints is ``{"ready": true, "uid": N, "sandbox": {...}}`` (the sandbox's status).
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import struct
import sys
import threading
from pathlib import Path

#: (audit arch, clone, clone3, unshare, setns, mount) of the architectures tested
_DOCKER_ARCHES = {"x86_64": (0xC000003E, 56, 435, 272, 308, 165),
                  "aarch64": (0xC00000B7, 220, 435, 97, 268, 40)}


def refuse_namespaces() -> None:
    """This process and its descendants get what Docker's default seccomp profile gives a
    container without CAP_SYS_ADMIN: ``clone`` with a CLONE_NEW* flag, ``unshare``,
    ``setns`` and ``mount`` fail with EPERM, ``clone3`` with ENOSYS (no_new_privs set)."""
    arch, clone, clone3, unshare, setns, mount = _DOCKER_ARCHES[platform.machine()]
    eperm, enosys, allow = 0x00050000 | 1, 0x00050000 | 38, 0x7FFF0000

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    program = b"".join([
        op(ld, 4), op(jeq, arch, 1, 0), op(ret, allow), op(ld, 0),
        op(jeq, unshare, 3, 0), op(jeq, setns, 2, 0), op(jeq, mount, 1, 0), op(jeq, clone3, 1, 2),
        op(ret, eperm), op(ret, enosys),
        op(jeq, clone, 0, 3), op(ld, 16), op(jset, 0x7E020080, 0, 1), op(ret, eperm),
        op(ret, allow)])
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog, len(fprog))
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.addressof(fprog_buffer), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot install the namespace-refusing seccomp filter")


class _RealTimers:
    """call_later on real time for the tools (threading.Timer: a test process only)."""

    def __call__(self, delay, fn):
        timer = threading.Timer(delay, fn)
        timer.daemon = True
        timer.start()
        return timer.cancel


def main() -> int:
    spec = json.loads(sys.argv[1])
    if spec.get("no_userns"):
        refuse_namespaces()
    from corvid_actors.tools.base import ToolContext
    from corvid_actors.tools.coding import coding_tools
    from corvid_actors.tools.env import safe_env
    from corvid_actors.tools.sandbox import Sandbox, SandboxSettings

    settings = SandboxSettings(**spec.get("settings", {}))
    sandbox = Sandbox(settings, hidden_paths=spec.get("hidden", []))
    ctx = ToolContext(project_dir=Path(spec["project"]), env=safe_env({}),
                      call_later=_RealTimers(), sandbox=sandbox,
                      sandbox_network=bool(spec.get("network", False)),
                      sandbox_cgroup=sandbox.session_cgroup())
    tools = {t.name: t for t in coding_tools()}
    print(json.dumps({"ready": True, "uid": os.geteuid(),
                      "sandbox": sandbox.status.as_dict()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            result = tools[request["tool"]].handler(request["args"], ctx)
            reply = {"output": result.output, "is_error": bool(result.is_error)}
        except Exception as exc:  # noqa: BLE001 - the test reads what was raised
            reply = {"raised": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)
    if ctx.sandbox_cgroup is not None:
        ctx.sandbox_cgroup.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
