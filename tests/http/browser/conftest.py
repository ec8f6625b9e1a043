"""Browser tests of the dashboard: headless Chromium (Debian's ``chromium``, driven by
Playwright through ``executable_path``) against a real runtime on the real clock, with a
scripted provider, behind the HTTP listener on uvicorn at 127.0.0.1:<a free port>.

Locally the tests skip when Playwright or Chromium is missing; under ``CI=true`` that is a
failure (``.ci/run`` installs both). Chromium runs as root here, where its own sandbox cannot
start: ``--no-sandbox`` (Playwright's ``chromium_sandbox=False``) — the page under test is
our own, on loopback.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn

from corvid_actors.clock import RealClock
from corvid_actors.config import Config
from corvid_actors.runtime import Runtime
from corvid_actors.testing import ScriptedProvider, real_monotonic
from tests.http.browser.standin_api import make_app, start_admin

#: every browser wait is bounded by this (milliseconds)
WAIT_MS = 10_000
OPERATE_TOKEN = "operate-token-0123456789abcdef"
READ_TOKEN = "read-token-0123456789abcdef"


def chromium_path() -> str | None:
    return os.environ.get("CORVID_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI must run the browser tests (.ci/run installs chromium and playwright)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[test]')")
    executable = chromium_path()
    if executable is None:
        _missing("no chromium on PATH (apt-get install chromium)")
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as p:
        # chromium_sandbox=False passes --no-sandbox: Chromium's sandbox cannot start as root
        browser = p.chromium.launch(executable_path=executable, chromium_sandbox=False, timeout=WAIT_MS)
        yield browser
        browser.close()


@dataclass
class Served:
    """A runtime behind the HTTP listener: its base URL, the scripted model, a project."""

    runtime: Runtime
    scripted: ScriptedProvider
    base_url: str
    project: Any
    agents: int = 0

    def session(self, *, source: str = "web", **fields: Any) -> Any:
        """A new session of a new agent (not started)."""
        self.agents += 1
        agent = self.runtime.create_agent(f"agent-{self.agents}", provider=self.scripted.name, model="scripted",
                                          system_prompt="You are a test agent.", kind="chat")
        return self.runtime.create_session(agent_id=agent.id, project_id=self.project.id, source=source, **fields)


def _serve(app: Any) -> tuple[uvicorn.Server, threading.Thread, str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = real_monotonic() + WAIT_MS / 1000
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped while starting"
        assert real_monotonic() < deadline, "uvicorn did not start"
        threading.Event().wait(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}"


@pytest.fixture
def served(tmp_path) -> Iterator[Served]:
    scripted = ScriptedProvider(RealClock())
    # crashes restart after 0.2 s instead of 5 s: the restart test waits in real time
    cfg = Config().replace(providers={"default_provider": scripted.name},
                           supervisor={"restart_backoff_base_s": 0.2})
    rt = Runtime(cfg, clock=RealClock(), store_url=f"sqlite:///{tmp_path / 'store.db'}",
                 providers={scripted.name: scripted}, workspace_dir=tmp_path / "ws",
                 loop_for_provider={scripted.name: "direct"})
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "notes.txt").write_text("hello\n")
    project = rt.create_project("demo", tmp_path / "project")
    admin = start_admin(rt)
    server, thread, url = _serve(make_app(rt, admin, {OPERATE_TOKEN: "operate", READ_TOKEN: "read"}))
    try:
        yield Served(rt, scripted, url, project)
    finally:
        server.should_exit = True
        thread.join(WAIT_MS / 1000)
        admin.stop()
        rt.shutdown()


@pytest.fixture
def page(browser, served) -> Iterator[Any]:  # closed before the server stops
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.js_errors = errors  # type: ignore[attr-defined]
    yield page
    context.close()


def login(page: Any, served: Served, token: str = OPERATE_TOKEN, then: str = "/") -> None:
    """Sign in through the login page, landing on ``then``."""
    page.goto(f"{served.base_url}/login?next={then}")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{served.base_url}{then}")
