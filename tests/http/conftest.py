"""The HTTP listener over a real runtime (simulated clock, in-memory SQLite, scripted
model) and a real AdminActor: the gateway is the one the daemon builds
(``daemon.http_listener.build_gateway``), so requests go through the admin protocol's
validator and the actor exactly as they do in ``serve``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pykka
import pytest

from corvid_actors.actors.admin import AdminActor, AdminCommand, AdminWiring, Follow, Ready
from corvid_actors.config import Config, DaemonConfig
from corvid_actors.daemon.http_listener import build_gateway
from corvid_actors.db.api_tokens import ApiTokenStore
from corvid_actors.http import AdminGateway, create_app
from corvid_actors.runtime import Runtime
from corvid_actors.testing import sim_runtime


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def admin_hooks(admin: pykka.ActorRef[Any]) -> tuple[Any, Any]:
    """The daemon's ``_handle`` and ``_follow`` over ``admin`` (service.Daemon's, without the daemon)."""
    def handle(request: Any) -> Any:
        result = admin.ask(AdminCommand(request.cmd, request.args, caller=request.caller))
        return result.get() if isinstance(result, pykka.Future) else result

    def follow(session_id: str | None, sink: Any) -> Any:
        return admin.ask(Follow(session_id, sink), block=True)

    return handle, follow


@dataclass
class Stack:
    runtime: Runtime
    admin: pykka.ActorRef[Any]
    gateway: AdminGateway
    tokens: ApiTokenStore
    read: str
    operate: str

    def app(self, **http: Any) -> Any:
        config = self.runtime.config.replace(http=http) if http else self.runtime.config
        return create_app(self.gateway, config.http, self.runtime.clock)

    def headers(self, token: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"} if token else {}

    @asynccontextmanager
    async def client(self, token: str | None = "operate", **http: Any) -> AsyncIterator[httpx.AsyncClient]:
        """An httpx client over the ASGI app (its lifespan run), authenticated with the
        ``read`` or ``operate`` token (or a literal one)."""
        app = self.app(**http)
        secret = {"read": self.read, "operate": self.operate}.get(token, token) if token else None
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                         headers=self.headers(secret)) as client:
                yield client


def make_stack(sim_clock: Any, scripted: Any, tmp_path: Any, *, direct: bool = False, credits: bool = False,
               store_url: str = "sqlite:///:memory:") -> tuple[Stack, Any]:
    extra: dict[str, Any] = {"loop_for_provider": {"scripted": "direct"}} if direct else {}
    (tmp_path / "ws").mkdir(exist_ok=True)
    rt = sim_runtime(sim_clock, scripted, config=Config(), workspace_dir=tmp_path / "ws", with_credits=credits,
                     store_url=store_url, **extra)
    tree = rt.internals
    admin = AdminActor.start(tree.tracker, AdminWiring(
        supervisor=tree.supervisor, approvals=tree.approvals, bus=tree.bus, timers=tree.timers,
        slot_pool=tree.slot_pool, credits=tree.credits, store=tree.store, providers=tree.providers,
        clock=rt.clock, settings=DaemonConfig(), about={"pid": 1}, request_shutdown=None,
    ))
    assert admin.ask(Ready()) is True
    handle, follow = admin_hooks(admin)
    gateway = build_gateway(rt, tree.store, tree.cluster, handle, follow)
    tokens = ApiTokenStore(tree.store)
    read = tokens.create("viewer", "read", now=sim_clock.now())
    operate = tokens.create("ops", "operate", now=sim_clock.now())
    return Stack(rt, admin, gateway, tokens, read, operate), admin


@contextmanager
def running_stack(sim_clock: Any, scripted: Any, tmp_path: Any, **kwargs: Any) -> Iterator[Stack]:
    s, admin = make_stack(sim_clock, scripted, tmp_path, **kwargs)
    try:
        yield s
    finally:
        admin.stop()
        s.runtime.shutdown()


@pytest.fixture
def stack(sim_clock: Any, scripted: Any, tmp_path: Any) -> Iterator[Stack]:
    with running_stack(sim_clock, scripted, tmp_path) as s:
        yield s
