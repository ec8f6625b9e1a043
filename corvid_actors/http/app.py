"""The Starlette application of the HTTP listener: the JSON API (:mod:`.routes`), the event
streams (:mod:`.sse`), ``/healthz``, ``/readyz``, ``/metrics`` and ``/openapi.json``.

Every API request is authenticated first (:mod:`.auth`), its arguments — from the path,
the query string or the JSON body — are checked by the admin protocol's validator, and
the command runs in the admin actor, all through the daemon's :class:`~.gateway.AdminGateway`
on worker threads (the event loop never blocks on an actor or the store). Errors are
``{"error": {"code", "message"}}`` with the admin error codes and an HTTP status
(:data:`HTTP_STATUS`). Each request is logged with its token's name.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from anyio import to_thread
from loguru import logger
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from corvid_actors.clock import Clock
from corvid_actors.errors import (
    BAD_REQUEST,
    BUSY,
    CONFLICT,
    FORBIDDEN,
    INTERNAL,
    NOT_FOUND,
    SHUTTING_DOWN,
    TIMEOUT,
    TOO_LARGE,
    UNAUTHORIZED,
    UNAVAILABLE,
    UNKNOWN_COMMAND,
    AdminError,
    CorvidError,
    admin_code,
)
from corvid_actors.http.auth import Caller, TokenCheck
from corvid_actors.http.dashboard import dashboard_routes
from corvid_actors.http.gateway import AdminGateway
from corvid_actors.http.openapi import openapi_document
from corvid_actors.http.routes import API_ROUTES, EVENT_ROUTES, ApiRoute
from corvid_actors.http.sse import EventHub
from corvid_actors.schema.sections import HttpConfig

#: the HTTP status of each admin error code
HTTP_STATUS = {
    BAD_REQUEST: 400, UNAUTHORIZED: 401, FORBIDDEN: 403, NOT_FOUND: 404, UNKNOWN_COMMAND: 404,
    CONFLICT: 409, TOO_LARGE: 413, INTERNAL: 500, UNAVAILABLE: 503, SHUTTING_DOWN: 503, BUSY: 503,
    TIMEOUT: 504,
}
_KINDS = {"int": "an integer", "number": "a number", "bool": "true or false"}


def json_response(data: Any, status: int = 200) -> Response:
    """``data`` as JSON (values JSON cannot hold written as strings, as the admin socket does)."""
    body = json.dumps(data, default=str, separators=(",", ":")).encode("utf-8")
    return Response(body, status, media_type="application/json")


def error_response(code: str, message: str) -> Response:
    """The error reply every route gives: ``{"error": {"code", "message"}}``."""
    return json_response({"error": {"code": code, "message": message}}, HTTP_STATUS.get(code, 500))


class HttpApp:
    """The routes and what they share: the gateway, the token check, the event hub."""

    def __init__(self, gateway: AdminGateway, settings: HttpConfig, clock: Clock) -> None:
        self.gateway = gateway
        self.settings = settings
        self.auth = TokenCheck(gateway.tokens, clock)
        self.hub = EventHub(settings.sse_backlog_events, settings.sse_client_queue_events)
        #: called on the listener's loop once the start-up is done (the listener waits for it)
        self.on_ready: Callable[[], None] | None = None

    # --- plumbing -------------------------------------------------------------------------

    async def _caller(self, request: Request) -> Caller:
        return await to_thread.run_sync(self.auth.caller, request.headers.get("authorization"))

    def _guarded(self, mutating: bool, handler: Callable[[Request, Caller], Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` behind the token check, its errors as JSON, each request logged."""
        async def endpoint(request: Request) -> Response:
            caller: Caller | None = None
            try:
                caller = await self._caller(request)
                caller.require(mutating)
                response = await handler(request, caller)
            except CorvidError as exc:
                response = error_response(admin_code(exc), exc.message if isinstance(exc, AdminError) else str(exc))
            except Exception as exc:  # noqa: BLE001 - one bad request must never take the listener down
                logger.opt(exception=True).error("http {} {} failed", request.method, request.url.path)
                response = error_response(INTERNAL, f"{type(exc).__name__}: {exc}")
            logger.bind(token=caller.name if caller else None).info(
                "http {} {} {} (token {})", request.method, request.url.path, response.status_code,
                caller.name if caller else "none")
            return response

        return endpoint

    async def _body(self, request: Request) -> dict[str, Any]:
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise AdminError(TOO_LARGE, f"request body longer than {limit} bytes")
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > limit:
                raise AdminError(TOO_LARGE, f"request body longer than {limit} bytes")
        if not raw.strip():
            return {}
        return self.gateway.parse_body(bytes(raw))

    def _query(self, command: str, request: Request) -> dict[str, Any]:
        """The query string as the command's arguments, each converted to its kind (the
        validator then checks them as it checks a socket request's)."""
        spec = self.gateway.commands.get(command, {})
        args: dict[str, Any] = {}
        for name, text in request.query_params.multi_items():
            kind = spec[name].kind if name in spec else "str"
            args[name] = _convert(command, name, kind, text)
        return args

    async def _run(self, command: str, args: dict[str, Any], caller: Caller | None = None) -> Any:
        checked = self.gateway.check(command, args)
        if caller is not None:  # who sent it, as the admin socket says it (approve/deny record it)
            checked = replace(checked, caller=f"http:{caller.name}")
        return await to_thread.run_sync(self.gateway.call, checked)

    # --- the API ------------------------------------------------------------------------------

    def api_endpoint(self, route: ApiRoute) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request, caller: Caller) -> Response:
            args = await self._body(request) if route.body else self._query(route.command, request)
            for given, name in route.renames.items():
                if given in args:
                    args[name] = args.pop(given)
            for param, name in route.path_args.items():
                args[name] = request.path_params[param]
            if route.command == "sessions_page" and "limit" not in args:
                args["limit"] = self.settings.sessions_page_default
            return json_response(await self._run(route.command, args, caller))

        return self._guarded(route.mutating, handler)

    async def events(self, request: Request, caller: Caller) -> Response:
        session = request.path_params.get("session_id")
        if session is not None:  # an unknown session is a 404, not an empty stream for ever
            detail = await self._run("session", {"session": session, "events": 1, "messages": 1})
            session = str(detail.get("id", session))
        backlog_text = request.query_params.get("backlog")
        backlog = _convert("events", "backlog", "int", backlog_text) if backlog_text is not None else None
        if backlog is not None and backlog < 0:
            raise AdminError(BAD_REQUEST, "events: argument 'backlog' must be >= 0")
        last = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
        stream, head = self.hub.open(session, last, backlog)
        return StreamingResponse(self.hub.blocks(stream, head, self.settings.sse_heartbeat_s),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    # --- operations ---------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        return json_response({"ok": True})

    async def readyz(self, request: Request) -> Response:
        reasons = await to_thread.run_sync(self.gateway.ready)
        ready = all(reason is None for reason in reasons.values())
        return json_response({"ready": ready, **reasons}, 200 if ready else 503)

    async def metrics(self, request: Request, caller: Caller) -> Response:
        if self.gateway.metrics is None:
            raise AdminError(NOT_FOUND, "this daemon serves no metrics")
        body, content_type = await to_thread.run_sync(self.gateway.metrics)
        return Response(body, media_type=content_type)

    async def openapi(self, request: Request) -> Response:
        return json_response(openapi_document(self.gateway.commands))

    async def not_found(self, request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        if status == 405:
            return json_response({"error": {"code": BAD_REQUEST, "message": f"{request.method} is not allowed "
                                             f"on {request.url.path}"}}, 405)
        return error_response(NOT_FOUND, f"no such route: {request.method} {request.url.path}")

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.hub.bind(asyncio.get_running_loop())
        unfollow = await to_thread.run_sync(self.gateway.follow, None, self.hub.publish)
        if self.on_ready is not None:
            self.on_ready()
        try:
            yield
        finally:
            self.hub.close()
            await to_thread.run_sync(unfollow)


def _convert(command: str, name: str, kind: str, text: str) -> Any:
    if kind == "str":
        return text
    try:
        if kind == "int":
            return int(text)
        if kind == "number":
            return float(text)
        if kind == "bool" and text.lower() in ("true", "false", "1", "0"):
            return text.lower() in ("true", "1")
    except ValueError:
        pass
    raise AdminError(BAD_REQUEST, f"{command}: argument {name!r} must be {_KINDS.get(kind, kind)}, got {text[:40]!r}")


def _mounted(mounts: Mapping[str, ASGIApp], own: list[Any]) -> list[Any]:
    """The embedder's mounts, checked against the listener's own paths."""
    result: list[Any] = []
    for prefix, app in mounts.items():
        stem = prefix.rstrip("/")
        taken = [r.path.rstrip("/") for r in own]
        if not stem.startswith("/") or any(p == stem or p.startswith(stem + "/") or (p and stem.startswith(p + "/"))
                                           for p in taken):
            raise ValueError(f"mount {prefix!r}: need a path prefix like '/webhook', not '/' nor one of the "
                             "listener's own paths")
        result.append(Mount(stem, app=app))
    return result


def create_app(gateway: AdminGateway, settings: HttpConfig, clock: Clock,
               mounts: Mapping[str, ASGIApp] | None = None) -> Starlette:
    """The listener's application. Its lifespan follows the daemon's events for the streams
    (run it: uvicorn does; a test enters ``app.router.lifespan_context(app)``).

    ``mounts`` maps a path prefix to an embedder's ASGI application served under it (e.g.
    ``{"/webhook": transport.asgi_app()}``, the chat webhook): it does its own authentication
    (the API token is not asked for), its lifespan is not run, and a prefix may not be ``/`` or
    overlap the listener's own paths (ValueError)."""
    http = HttpApp(gateway, settings, clock)
    routes = [Route(r.path, http.api_endpoint(r), methods=[r.method], name=f"{r.method} {r.path}")
              for r in API_ROUTES]
    routes += [Route(path, http._guarded(False, http.events), methods=["GET"]) for path in EVENT_ROUTES]
    routes += [
        Route("/healthz", http.healthz, methods=["GET"]),
        Route("/readyz", http.readyz, methods=["GET"]),
        Route("/metrics", http._guarded(False, http.metrics), methods=["GET"]),
        Route("/openapi.json", http.openapi, methods=["GET"]),
    ]
    routes += dashboard_routes()  # the dashboard's pages and assets (they hold no data: no token)
    routes = _mounted(mounts or {}, routes) + routes
    app = Starlette(routes=routes, lifespan=http.lifespan,
                    exception_handlers={HTTPException: http.not_found})
    app.state.http = http
    return app
