"""The daemon's HTTP listener (issue 39): a JSON API mirroring the admin commands,
server-sent events, ``/healthz``, ``/readyz``, ``/metrics`` and ``/openapi.json``, on
Starlette and uvicorn (the ``http`` extra).

The daemon imports this package only when ``[http] listen`` is set
(:mod:`corvid_actors.daemon.http_listener`) and hands it an :class:`AdminGateway`: the
admin protocol's validator, the admin actor's command handler and event follower, and
the API tokens. ``ROUTES.md`` beside this file describes the routes for client writers.
"""

from corvid_actors.http.app import HTTP_STATUS, create_app
from corvid_actors.http.gateway import AdminGateway
from corvid_actors.http.server import HttpListener

__all__ = ["HTTP_STATUS", "AdminGateway", "HttpListener", "create_app"]
