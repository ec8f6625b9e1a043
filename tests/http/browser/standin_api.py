"""A stand-in for the JSON API while the http-api branch is not merged: the route contract
of issue 39 (bearer token, ``/api/v1/...``, SSE with ``id:`` lines) over the real
AdminActor of a real runtime. Replaced by the real app once it lands."""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from corvid_actors.actors.admin import AdminActor, AdminCommand, AdminWiring, Ready
from corvid_actors.errors import AdminError
from corvid_actors.events import to_dict
from corvid_actors.http.dashboard import dashboard_routes


def start_admin(rt: Any) -> Any:
    i = rt.internals
    admin = AdminActor.start(i.tracker, AdminWiring(
        supervisor=i.supervisor, approvals=i.approvals, bus=i.bus, timers=i.timers, slot_pool=i.slot_pool,
        credits=i.credits, store=i.store, providers=i.providers, clock=rt.clock, about={"pid": 1}))
    assert admin.ask(Ready()) is True
    return admin


def make_app(rt: Any, admin: Any, tokens: dict[str, str]) -> Starlette:
    """``tokens``: token -> scope (``read`` | ``operate``)."""
    ids = itertools.count(1)

    def auth(request: Request, mutate: bool) -> Response | None:
        header = request.headers.get("authorization", "")
        given = header.removeprefix("Bearer ")
        scope = next((s for t, s in tokens.items() if hmac.compare_digest(t, given)), None)
        if scope is None:
            return JSONResponse({"error": {"code": "unauthorized", "message": "no valid token"}}, 401)
        if mutate and scope != "operate":
            return JSONResponse({"error": {"code": "forbidden", "message": "read token"}}, 403)
        return None

    def command(name: str, **args: Any) -> Any:
        reply = admin.ask(AdminCommand(name, args))
        return reply.get() if hasattr(reply, "get") and not isinstance(reply, dict) else reply

    def endpoint(name: str, mutate: bool = False, body_key: str | None = None):  # type: ignore[no-untyped-def]
        async def run(request: Request) -> Response:
            denied = auth(request, mutate)
            if denied is not None:
                return denied
            args: dict[str, Any] = {}
            if "sid" in request.path_params:
                args["session"] = request.path_params["sid"]
            if "aid" in request.path_params:
                args["approval"] = request.path_params["aid"]
            if request.method in ("POST", "PUT"):
                body = await request.json()
                if body_key and body_key in body:
                    args[body_key] = body[body_key]
            for key in ("status", "tail"):
                if key in request.query_params:
                    args[key] = int(request.query_params[key]) if key == "tail" else request.query_params[key]
            try:
                result = await asyncio.to_thread(command, name, **args)
            except AdminError as exc:
                return JSONResponse({"error": {"code": exc.code, "message": str(exc)}}, 404 if exc.code == "not_found" else 400)
            if name == "sessions":
                result = {"sessions": result, "next_cursor": None}
            if name == "approvals":
                result = {"approvals": result}
            return JSONResponse(result)
        return run

    async def events(request: Request) -> Response:
        denied = auth(request, False)
        if denied is not None:
            return denied
        sid = request.path_params.get("sid")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def on_event(session_id: str, event: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, {"session_id": session_id, **to_dict(event)})

        async def body() -> AsyncIterator[str]:
            if sid:
                rt.subscribe(sid, on_event)
            else:
                rt.subscribe_all(on_event)
            try:
                yield ": open\n\n"
                while True:
                    data = await queue.get()
                    yield f"id: {next(ids)}\ndata: {json.dumps(data)}\n\n"
            finally:
                if sid:
                    rt.unsubscribe(sid, on_event)
                else:
                    rt.unsubscribe_all(on_event)

        return StreamingResponse(body(), media_type="text/event-stream")

    api = [
        Route("/sessions", endpoint("sessions")),
        Route("/sessions/{sid}", endpoint("session")),
        Route("/sessions/{sid}/history", endpoint("history")),
        Route("/sessions/{sid}/messages", endpoint("send", True, "text"), methods=["POST"]),
        Route("/sessions/{sid}/events", events),
        Route("/approvals", endpoint("approvals")),
        Route("/approvals/{aid}/approve", endpoint("approve", True), methods=["POST"]),
        Route("/approvals/{aid}/deny", endpoint("deny", True), methods=["POST"]),
        Route("/mode", endpoint("mode")),
        Route("/mode", endpoint("mode", True, "mode"), methods=["PUT"]),
        Route("/health", endpoint("health")),
        Route("/stats", endpoint("stats")),
        Route("/events", events),
    ]
    for verb in ("stop", "resume", "restart", "extend"):
        api.append(Route(f"/sessions/{{sid}}/{verb}", endpoint(verb, True), methods=["POST"]))
    return Starlette(routes=[Mount("/api/v1", routes=api), *dashboard_routes()])
