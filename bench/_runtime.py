"""A real-clock Runtime on the stub, for the streaming, scale and control benchmarks."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from bench._stub_proc import BENCH_MODEL


def real_runtime(url: str, workdir: Path, *, max_parallel: int, idle_timeout_s: float = 3600.0,
                 supervisor: dict[str, Any] | None = None, session: dict[str, Any] | None = None) -> Any:
    """A Runtime with the real clock, a SQLite WAL file and the Ollama provider on ``url``.

    ``max_parallel`` is the slot pool's capacity (the bench model weighs 1); idle sessions
    stay alive for ``idle_timeout_s`` so that they can be counted. ``supervisor``: more
    ``[supervisor]`` settings (an older tree may not know a key: pass none there);
    ``session``: more ``[session]`` settings.
    """
    from corvid_actors.config import Config
    from corvid_actors.providers.ollama import OllamaProvider
    from corvid_actors.runtime import Runtime

    cfg = Config().replace(
        slots={"max_parallel": max_parallel},
        supervisor={"session_idle_timeout_s": idle_timeout_s, **(supervisor or {})},
        session=session or {},
        providers={"ollama_host": url},
    )
    return Runtime(cfg, store_url=f"sqlite:///{workdir / 'corvid.db'}",
                   providers={"ollama": OllamaProvider(url)}, workspace_dir=workdir / "ws")


def create_sessions(runtime: Any, workdir: Path, n: int) -> list[str]:
    """``n`` sessions of one Ollama chat agent: the direct loop, no tools (so no nudges: the
    loop calls the model once per user message, as a chat bot's session does)."""
    project_dir = workdir / "project"
    project_dir.mkdir(exist_ok=True)
    project = runtime.create_project("bench", project_dir)
    agent = runtime.create_agent("bench-agent", provider="ollama", model=BENCH_MODEL,
                                 permission_mode="full-auto", system_prompt="You are a benchmark.",
                                 tool_permissions=[])
    return [runtime.create_session(agent_id=agent.id, project_id=project.id, name=f"s{i}").id
            for i in range(n)]


class Waiter:
    """Counts events by type and wakes a waiter when a count is reached."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.counts: dict[str, int] = {}

    def bump(self, event_type: str) -> None:
        with self._cond:
            self.counts[event_type] = self.counts.get(event_type, 0) + 1
            self._cond.notify_all()

    def wait(self, event_type: str, count: int, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.counts.get(event_type, 0) >= count, timeout_s)
