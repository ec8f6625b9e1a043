"""The dashboard's routes: pages rendered from this package's templates, and its assets.

Every page is the layout (``templates/layout.html``) around one body template; the values a
page puts in (its title, a session id from the path) are HTML-escaped here. Data comes later,
from the JSON API, read by ``static/dashboard.js`` with the token from ``sessionStorage``.
Responses carry a Content-Security-Policy that allows scripts, styles and connections to
this origin only (no inline script, no ``eval``), and forbid framing (clickjacking).
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

#: a page's headers: the page cannot be framed, loads nothing from other origins, runs no
#: inline script, sends no referrer (a session id in the path stays here)
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

#: the assets the pages load, with their media types
ASSETS = {"dashboard.js": "text/javascript; charset=utf-8", "dashboard.css": "text/css; charset=utf-8"}


@dataclass(frozen=True)
class Page:
    """One page: its path, the body template, its title and its entry in the navigation."""

    path: str
    name: str
    title: str
    #: shown in the navigation bar (the session page and the login page are not)
    in_nav: bool = True


#: the dashboard's pages, in the navigation's order
PAGES = (
    Page("/", "sessions", "Sessions"),
    Page("/approvals", "approvals", "Approvals"),
    Page("/health", "health", "Health"),
    Page("/mode", "mode", "Mode"),
    Page("/sessions/{session_id}", "session", "Session", in_nav=False),
    Page("/login", "login", "Sign in", in_nav=False),
)


def _package_text(*parts: str) -> str:
    return resources.files(__package__).joinpath(*parts).read_text(encoding="utf-8")


@cache
def _template(name: str) -> Template:
    return Template(_package_text("templates", f"{name}.html"))


@cache
def _asset(name: str) -> tuple[bytes, str]:
    """An asset's bytes and a short hash of them (its version in the pages' URLs)."""
    data = _package_text("static", name).encode("utf-8")
    return data, hashlib.sha256(data).hexdigest()[:12]


def _nav(current: Page) -> str:
    links = []
    for page in PAGES:
        if page.in_nav:
            here = ' aria-current="page"' if page is current else ""
            links.append(f'<a href="{page.path}"{here}>{html.escape(page.title)}</a>')
    return "\n      ".join(links)


def render_page(page: Page, **values: str) -> str:
    """The page's HTML: the layout around its body, every value escaped."""
    escaped = {key: html.escape(value, quote=True) for key, value in values.items()}
    body = _template(page.name).substitute(escaped)
    title = escaped.get("title", html.escape(page.title))
    return _template("layout").substitute(
        title=title, page=page.name, nav=_nav(page) if page.name != "login" else "", body=body,
        js_version=_asset("dashboard.js")[1], css_version=_asset("dashboard.css")[1])


def _page_endpoint(page: Page) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        values = {key: str(value) for key, value in request.path_params.items()}
        if page.name == "session":
            values["title"] = f"Session {values['session_id']}"
        return HTMLResponse(render_page(page, **values), headers=SECURITY_HEADERS)
    endpoint.__name__ = f"dashboard_{page.name}"
    return endpoint


async def _asset_endpoint(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        return Response("no such asset", status_code=404, media_type="text/plain")
    data, version = _asset(name)
    if request.headers.get("if-none-match") == f'"{version}"':
        return Response(status_code=304, headers={"ETag": f'"{version}"'})
    return Response(data, media_type=ASSETS[name], headers={
        "ETag": f'"{version}"', "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})


async def _no_favicon(request: Request) -> Response:
    return Response(status_code=204)


def dashboard_routes() -> list[Route]:
    """The dashboard's routes, for the HTTP app to mount at ``/`` (pages at ``/``,
    ``/sessions/{id}``, ``/approvals``, ``/health``, ``/mode``, ``/login``; assets under
    ``/assets/``). Page loads need no token: the pages hold no data (module docstring)."""
    routes = [Route(page.path, _page_endpoint(page), methods=["GET"]) for page in PAGES]
    routes.append(Route("/assets/{name}", _asset_endpoint, methods=["GET"]))
    routes.append(Route("/favicon.ico", _no_favicon, methods=["GET"]))
    return routes
