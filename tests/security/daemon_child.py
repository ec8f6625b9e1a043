"""The daemon side of a security test, run in a process of its own as another uid.

Started by ``tests.security.as_user`` through ``setpriv`` with a readable copy of the
package on ``PYTHONPATH``: it builds the same :class:`ToolContext` a session builds (the
coding tools, the allowlisted environment, the OS sandbox over the project, the daemon's
data directory hidden) and answers one JSON request a line on stdin with one JSON reply a
line on stdout, until stdin closes. Standard library and ``corvid_actors`` only.

A request is ``{"tool": NAME, "args": {...}}``; the reply ``{"output": str, "is_error":
bool}``, or ``{"raised": "Type: message"}`` when the handler raised. The first line the
child prints is ``{"ready": true, "uid": N, "sandbox": {...}}`` (the sandbox's status).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path


class _RealTimers:
    """call_later on real time for the tools (threading.Timer: a test process only)."""

    def __call__(self, delay, fn):
        timer = threading.Timer(delay, fn)
        timer.daemon = True
        timer.start()
        return timer.cancel


def main() -> int:
    spec = json.loads(sys.argv[1])
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
