"""Issue 39 item 5: ``/openapi.json`` describes exactly the routes the app serves, and the
arguments it lists are the ones the admin protocol's validator accepts."""

from __future__ import annotations

import pytest
from starlette.routing import Route

from corvid_actors.daemon.protocol import COMMANDS
from corvid_actors.http.dashboard import dashboard_routes
from corvid_actors.http.routes import API_ROUTES

pytestmark = pytest.mark.anyio


def served(app) -> set[tuple[str, str]]:
    out = set()
    for route in app.routes:
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":
                out.add((method.lower(), route.path))
    return out


async def test_the_document_lists_every_route_and_only_those(stack):
    app = stack.app()
    async with stack.client(token=None) as c:
        doc = (await c.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    pages = {("get", route.path) for route in dashboard_routes()}  # the dashboard's HTML, not the API
    assert documented == served(app) - {("get", "/openapi.json")} - pages


async def test_each_operation_names_its_command_scope_and_the_validators_arguments(stack):
    async with stack.client(token=None) as c:
        doc = (await c.get("/openapi.json")).json()
    for route in API_ROUTES:
        op = doc["paths"][route.path][route.method.lower()]
        assert op["x-admin-command"] == route.command
        assert op["x-scope"] == ("operate" if route.method != "GET" else "read")
        assert op["security"] == [{"bearer": []}]
        args = set(COMMANDS[route.command]) - set(route.path_args.values())
        outside = {inner: outer for outer, inner in route.renames.items()}
        if route.body:
            schema = op["requestBody"]["content"]["application/json"]["schema"]
            assert set(schema["properties"]) == {outside.get(a, a) for a in args}
            required = {outside.get(a, a) for a in args if COMMANDS[route.command][a].required}
            assert set(schema.get("required", [])) == required
        else:
            query = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
            assert query == args
        path_params = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
        assert path_params == set(route.path_args)
    start = doc["paths"]["/api/v1/sessions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"agent", "message"} <= set(start["required"])  # `message` outside is start's `prompt`
