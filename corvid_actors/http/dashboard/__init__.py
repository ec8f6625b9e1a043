"""The operators' web dashboard: server-rendered pages over the JSON API.

:func:`dashboard_routes` gives the Starlette routes the HTTP app mounts at ``/``: the pages
(sessions, one session, approvals, health, mode, login) and their two assets (one script,
one stylesheet), all served from this package's data — no build step, no CDN.

The pages carry no data of their own: a page load is not authenticated (the token lives in
the browser's ``sessionStorage`` and travels only in an ``Authorization`` header, never in a
cookie, so a page request cannot carry it and no other site can make the browser send it).
The page's script reads the JSON API with the token and renders every value with
``textContent``; the server escapes what little it puts in a page (a session id taken from
the path). A strict Content-Security-Policy (scripts only from this origin, none inline)
backs the escaping up.
"""

from __future__ import annotations

from corvid_actors.http.dashboard.pages import PAGES, dashboard_routes

__all__ = ["PAGES", "dashboard_routes"]
