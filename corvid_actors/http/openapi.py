"""The API's OpenAPI 3.1 document (``/openapi.json``), made from the route table
(:data:`~corvid_actors.http.routes.API_ROUTES`) and the admin commands' arguments: the
parameters and bodies it lists are the ones the validator accepts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corvid_actors.http.gateway import ArgSpec
from corvid_actors.http.routes import API_ROUTES, EVENT_ROUTES, ApiRoute

_JSON_TYPES = {"str": "string", "int": "integer", "number": "number", "bool": "boolean"}
_ERROR = {"$ref": "#/components/schemas/Error"}
_ERRORS = {
    "400": "bad_request: the validator's reason", "401": "unauthorized: no valid token",
    "403": "forbidden: a read token on a change", "404": "not_found: unknown session, approval or route",
    "409": "conflict", "413": "too_large", "503": "unavailable / shutting_down / busy",
}


def _schema(arg: ArgSpec) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": _JSON_TYPES.get(arg.kind, "string")}
    if arg.must:
        schema["description"] = arg.must
    return schema


def _operation(route: ApiRoute, args: Mapping[str, ArgSpec]) -> dict[str, Any]:
    from_path = set(route.path_args.values())
    params: list[dict[str, Any]] = [
        {"name": param, "in": "path", "required": True, "schema": {"type": "string"}}
        for param in route.path_args]
    op: dict[str, Any] = {"summary": route.summary, "operationId": f"{route.command}_{route.method.lower()}",
                          "x-admin-command": route.command, "security": [{"bearer": []}],
                          "x-scope": "operate" if route.mutating else "read"}
    fields = {name: arg for name, arg in args.items() if name not in from_path}
    outside = {inner: outer for outer, inner in route.renames.items()}
    if route.body:
        properties = {outside.get(name, name): _schema(arg) for name, arg in fields.items()}
        required = [outside.get(name, name) for name, arg in fields.items() if arg.required]
        body: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
        if required:
            body["required"] = required
        op["requestBody"] = {"required": bool(required), "content": {"application/json": {"schema": body}}}
    else:
        params += [{"name": name, "in": "query", "required": arg.required, "schema": _schema(arg)}
                   for name, arg in fields.items()]
    if params:
        op["parameters"] = params
    op["responses"] = {"200": {"description": "the command's result (as the admin socket's `result`)",
                               "content": {"application/json": {"schema": {}}}},
                       **{code: {"description": text, "content": {"application/json": {"schema": _ERROR}}}
                          for code, text in _ERRORS.items()}}
    return op


def _events_operation(path: str) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"name": "backlog", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0}},
        {"name": "last_event_id", "in": "query", "required": False, "schema": {"type": "string"}},
        {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}},
    ]
    if "{session_id}" in path:
        params.insert(0, {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}})
    return {"summary": "Server-sent events: the backlog, then live events",
            "operationId": "events_one" if "{session_id}" in path else "events_all",
            "security": [{"bearer": []}], "x-scope": "read", "parameters": params,
            "responses": {"200": {"description": "`id:` and `data: {session_id, at, event}` blocks",
                                  "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                          "401": {"description": "unauthorized", "content": {"application/json": {"schema": _ERROR}}},
                          "404": {"description": "not_found", "content": {"application/json": {"schema": _ERROR}}}}}


#: the routes outside the API (no token, or not JSON)
PLAIN_ROUTES = {
    "/healthz": ("the process is up", False),
    "/readyz": ("the store is reachable and, in cluster mode, this daemon registered (503 if not)", False),
    "/metrics": ("Prometheus metrics (text exposition format)", True),
}


def openapi_document(commands: Mapping[str, Mapping[str, ArgSpec]]) -> dict[str, Any]:
    """The OpenAPI document of the API (``commands``: each admin command's arguments)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in API_ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, commands.get(route.command, {}))
    for path in EVENT_ROUTES:
        paths.setdefault(path, {})["get"] = _events_operation(path)
    for path, (summary, secured) in PLAIN_ROUTES.items():
        op: dict[str, Any] = {"summary": summary, "responses": {"200": {"description": "OK"}}}
        if secured:
            op["security"] = [{"bearer": []}]
        paths[path] = {"get": op}
    return {
        "openapi": "3.1.0",
        "info": {"title": "corvid-actors daemon API", "version": "1"},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "`corvid-actors admin token create`"}},
            "schemas": {"Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}}},
        },
    }
