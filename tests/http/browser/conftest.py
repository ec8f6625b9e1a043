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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from corvid_actors.actors.admin import AdminActor, AdminWiring, Ready
from corvid_actors.clock import RealClock
from corvid_actors.config import Config, DaemonConfig
from corvid_actors.daemon.http_listener import build_gateway
from corvid_actors.db.api_tokens import ApiTokenStore
from corvid_actors.http import HttpListener
from corvid_actors.runtime import Runtime
from corvid_actors.testing import ScriptedProvider
from tests.http.conftest import admin_hooks

#: every browser wait is bounded by this (milliseconds)
WAIT_MS = 10_000


def chromium_path() -> str | None:
    return os.environ.get("CORVID_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI must run the browser tests (.ci/run installs chromium and playwright)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one module's tests. Not for the whole session: Playwright's sync API
    keeps its event loop marked running on this thread while it is open, and the next
    module's async tests (anyio) could not start theirs."""
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
    """A runtime behind the HTTP listener: its base URL, the scripted model, a project and
    an API token of each scope."""

    runtime: Runtime
    scripted: ScriptedProvider
    project: Any
    operate: str
    read: str
    base_url: str = ""
    agents: int = 0

    def session(self, *, source: str = "web", **fields: Any) -> Any:
        """A new session of a new chat agent (not started)."""
        self.agents += 1
        agent = self.runtime.create_agent(f"agent-{self.agents}", provider=self.scripted.name, model="scripted",
                                          system_prompt="You are a test agent.", kind="chat")
        return self.runtime.create_session(agent_id=agent.id, project_id=self.project.id, source=source, **fields)


@pytest.fixture
def served(tmp_path) -> Iterator[Served]:
    """The daemon's parts as ``serve`` wires them: the runtime, its AdminActor, the gateway
    and the HTTP listener (uvicorn on its own thread) at 127.0.0.1:<a free port>."""
    scripted = ScriptedProvider(RealClock())
    # crashes restart after 0.2 s instead of 5 s: the restart test waits in real time; each
    # scripted delta reaches the page as its own event, however busy the machine
    cfg = Config().replace(providers={"default_provider": scripted.name},
                           supervisor={"restart_backoff_base_s": 0.2, "coalesce_deltas": False},
                           http={"listen": "127.0.0.1:0"})
    rt = Runtime(cfg, clock=RealClock(), store_url=f"sqlite:///{tmp_path / 'store.db'}",
                 providers={scripted.name: scripted}, workspace_dir=tmp_path / "ws",
                 loop_for_provider={scripted.name: "direct"})
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "notes.txt").write_text("hello\n")
    tree = rt.internals
    admin = AdminActor.start(tree.tracker, AdminWiring(
        supervisor=tree.supervisor, approvals=tree.approvals, bus=tree.bus, timers=tree.timers,
        slot_pool=tree.slot_pool, credits=tree.credits, store=tree.store, providers=tree.providers,
        clock=rt.clock, settings=DaemonConfig(), about={"pid": 1}))
    assert admin.ask(Ready()) is True
    tokens = ApiTokenStore(tree.store)
    served = Served(rt, scripted, rt.create_project("demo", tmp_path / "project"),
                    operate=tokens.create("ops", "operate", now=rt.clock.now()),
                    read=tokens.create("viewer", "read", now=rt.clock.now()))
    listener = HttpListener(build_gateway(rt, tree.store, tree.cluster, *admin_hooks(admin)), cfg.http, rt.clock)
    listener.start()
    served.base_url = listener.url
    try:
        yield served
    finally:
        listener.stop()
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


def login(page: Any, served: Served, token: str | None = None, then: str = "/") -> None:
    """Sign in through the login page (with the ``operate`` token unless told), landing on ``then``."""
    page.goto(f"{served.base_url}/login?next={then}")
    page.fill("#token", token or served.operate)
    page.click("button[type=submit]")
    page.wait_for_url(f"{served.base_url}{then}")
