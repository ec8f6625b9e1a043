"""The daemon's HTTP listener, started by ``serve`` when ``[http] listen`` is set.

:mod:`corvid_actors.http` (Starlette and uvicorn: the ``http`` extra) is imported only
here and only then: a plain install runs the daemon without it, and says which extra to
install when ``listen`` is set. The listener gets the admin socket's own functions — the
protocol's validator, the daemon's command handler (the AdminActor, forwarding in cluster
mode) and its event follower — through an :class:`~corvid_actors.http.AdminGateway`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from corvid_actors.daemon.process import DaemonError
from corvid_actors.daemon.protocol import COMMANDS, check_command, parse_object
from corvid_actors.db.api_tokens import ApiTokenStore
from corvid_actors.db.store import Store
from corvid_actors.runtime import Runtime

Handle = Callable[[Any], Any]
FollowFn = Callable[[str | None, Callable[[str, str, dict[str, Any]], None]], Callable[[], None]]
#: what a listener needs installed
_MODULES = ("starlette", "uvicorn")


def http_available() -> bool:
    """Starlette and uvicorn are importable (the ``http`` extra)."""
    return all(importlib.util.find_spec(name) is not None for name in _MODULES)


def start_http_listener(runtime: Runtime, store: Store, seat: Any, handle: Handle, follow: FollowFn,
                        mounts: dict[str, Any] | None = None) -> Any:
    """Start the listener of ``runtime.config.http`` (returns it: ``.url``, ``.stop()``).
    ``store`` is the runtime's store (the tokens, ``/readyz``), ``seat`` its cluster seat
    (None: one daemon); ``handle`` and ``follow`` are the daemon's admin socket hooks;
    ``mounts`` are an embedder's extra ASGI apps by path prefix (``serve`` passes none)."""
    if not http_available():
        raise DaemonError(f"[http] listen = {runtime.config.http.listen!r} needs Starlette and uvicorn: "
                          "install the http extra (pip install 'corvid-actors[http]') or set [http] listen = \"\"")
    from corvid_actors.http import HttpListener

    listener = HttpListener(build_gateway(runtime, store, seat, handle, follow), runtime.config.http, runtime.clock,
                            mounts)
    listener.start()
    return listener


def build_gateway(runtime: Runtime, store: Store, seat: Any, handle: Handle, follow: FollowFn) -> Any:
    """The :class:`~corvid_actors.http.AdminGateway` of ``runtime`` (needs the ``http`` extra)."""
    from corvid_actors.http import AdminGateway

    registry = runtime.metrics.registry

    def ready() -> dict[str, str | None]:
        reasons: dict[str, str | None] = {"store": store.probe()}
        if seat is not None:
            reasons["cluster"] = None if seat.lease_valid() else (
                f"daemon {seat.daemon_id} has no valid lease: not registered, or no heartbeat for "
                f"{seat.config.lease_s:g}s")
        return reasons

    return AdminGateway(check=check_command, parse_body=parse_object, call=handle, follow=follow,
                        commands=COMMANDS, ready=ready, tokens=ApiTokenStore(store),
                        metrics=lambda: (generate_latest(registry), CONTENT_TYPE_LATEST))
