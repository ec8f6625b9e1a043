"""The dashboard's pages as the server renders them (no browser): every page answers with
its skeleton and a strict Content-Security-Policy, values from the path are escaped, the
assets come from the package, and a page load sets no cookie and needs no token."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from corvid_actors.http.dashboard import PAGES, dashboard_routes
from corvid_actors.http.dashboard.pages import ASSETS


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(Starlette(routes=dashboard_routes()))


@pytest.mark.parametrize("path,page", [("/", "sessions"), ("/approvals", "approvals"), ("/health", "health"),
                                       ("/mode", "mode"), ("/login", "login"), ("/sessions/abc-123", "session")])
def test_each_page_is_its_skeleton_with_the_script_and_a_strict_policy(client, path, page):
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert f'<body data-page="{page}">' in response.text
    assert '<script src="/assets/dashboard.js?v=' in response.text
    assert "<script>" not in response.text  # no inline script: the policy would refuse it anyway
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe" not in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "set-cookie" not in response.headers


def test_every_page_is_routed():
    assert {page.name for page in PAGES} == {"sessions", "approvals", "health", "mode", "login", "session"}


def test_a_session_id_in_the_path_is_escaped_in_the_page(client):
    response = client.get('/sessions/"><script>alert(1)<\\script>')
    assert response.status_code == 200
    assert "<script>alert" not in response.text
    assert 'data-session-id="&quot;&gt;&lt;script&gt;alert(1)&lt;\\script&gt;"' in response.text
    assert "<title>Session &quot;&gt;&lt;script&gt;" in response.text


@pytest.mark.parametrize("name", sorted(ASSETS))
def test_assets_are_served_from_the_package_with_a_version_the_pages_name(client, name):
    response = client.get(f"/assets/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"] == ASSETS[name]
    etag = response.headers["etag"]
    assert f"/assets/{name}?v={etag.strip(chr(34))}" in client.get("/").text
    assert client.get(f"/assets/{name}", headers={"if-none-match": etag}).status_code == 304


def test_an_unknown_asset_is_not_found(client):
    assert client.get("/assets/../pages.py").status_code == 404
    assert client.get("/assets/secrets.txt").status_code == 404


def test_the_script_renders_text_only_and_keeps_the_token_out_of_cookies():
    """The rule the browser tests check in practice, held in the source: no innerHTML, no
    eval, no cookie, and every fetch sends no credentials but the header."""
    from importlib import resources
    source = resources.files("corvid_actors.http.dashboard").joinpath("static", "dashboard.js").read_text()
    for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "document.cookie",
                   "localStorage", "EventSource("):
        assert banned not in source, banned
    assert source.count("fetch(") == source.count('credentials: "omit"') == 2
