"""End-to-end fixtures: the real clients against loopback stub servers, driven through the runtime.

Supervision runs on the simulated clock; HTTP runs in real time on 127.0.0.1. A worker in an
HTTP call counts as work in flight, so ``runtime.settle()`` waits for the stub to answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corvid_actors.config import Config
from corvid_actors.runtime import Runtime
from corvid_actors.testing import EventRecorder, SimClock


@pytest.fixture(autouse=True)
def _scrub_provider_env(monkeypatch):
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "OLLAMA_HOST"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def project_dir(tmp_path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# demo project\nhello from the project\n")
    (root / ".env").write_text("SECRET=do-not-touch\n")
    return root


class E2E:
    """A runtime on a SimClock with real providers, plus helpers to create agents and sessions."""

    def __init__(self, runtime: Runtime, clock: SimClock, project_dir: Path) -> None:
        self.runtime = runtime
        self.clock = clock
        self.recorder = EventRecorder.attach(runtime)
        self.project = runtime.create_project("demo", project_dir)
        #: agents are named agent-0, agent-1, … in the order made; counted here rather than
        #: by listing every agent per session (quadratic: most of a 1,000-session test)
        self._agents_made = len(runtime.internals.store.list_agents())

    def session(self, *, provider: str, model: str, mode: str = "default", source: str = "web",
                tools: list[str] | None = None, **fields: Any) -> Any:
        agent = self.runtime.create_agent(
            f"agent-{self._agents_made}", provider=provider, model=model,
            permission_mode=mode, system_prompt="You are a test agent.", tool_permissions=tools,
        )
        self._agents_made += 1
        return self.runtime.create_session(agent_id=agent.id, project_id=self.project.id, source=source,
                                           **fields)

    def types(self, sid: str, *, skip=("thinking", "content_block_delta", "system", "context_usage",
                                      "message_stop")) -> list[str]:
        return [r.type for r in self.recorder.of(sid) if r.type not in skip]

    def events(self, sid: str, type: str) -> list[Any]:
        return [r.event for r in self.recorder.of(sid, type)]


@pytest.fixture
def make_e2e(project_dir, tmp_path) -> Iterator[Any]:
    made: list[tuple[Runtime, SimClock]] = []

    def make(providers: dict[str, Any], config: Config | None = None, **kwargs: Any) -> E2E:
        clock = SimClock()
        runtime = Runtime(config or Config(), clock=clock, store_url="sqlite:///:memory:", providers=providers,
                          workspace_dir=tmp_path / "ws", **kwargs)
        made.append((runtime, clock))
        return E2E(runtime, clock, project_dir)

    yield make
    for runtime, clock in made:
        runtime.shutdown()
        clock.close()
