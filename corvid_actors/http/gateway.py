"""What the HTTP listener needs of the daemon, handed in by it (:mod:`corvid_actors.daemon.http_listener`).

The listener sits below the daemon in the layers: it does not import the admin protocol
or the daemon. The daemon gives it the same functions its admin socket uses — the
request validator (``check``), the admin actor's command handler (``call``, which in
cluster mode forwards as the socket does) and its event follower (``follow``) — so a
command reaches the AdminActor through one definition over two transports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from corvid_actors.db.api_tokens import ApiTokenStore

#: ``sink(session_id, at_iso, event_dict)``, called on the EventBus thread
Sink = Callable[[str, str, dict[str, Any]], None]


class ArgSpec(Protocol):
    """One argument of an admin command (``daemon.protocol.Arg``): its JSON kind
    (``str``/``int``/``number``/``bool``), whether it is required, its rule in words."""

    @property
    def kind(self) -> str: ...

    @property
    def required(self) -> bool: ...

    @property
    def must(self) -> str: ...


@dataclass(frozen=True)
class AdminGateway:
    """The daemon's side of the HTTP listener. Every callable may block (the listener
    calls them on worker threads, never on its event loop)."""

    #: ``check(cmd, args)`` → a checked request with ``.cmd`` and ``.args``, or raises
    #: ``AdminError`` (``bad_request`` …): the admin protocol's validator
    check: Callable[[str, dict[str, Any]], Any]
    #: ``parse_body(raw)`` → a JSON object, or raises ``AdminError`` ``bad_request``
    parse_body: Callable[[bytes], dict[str, Any]]
    #: ``call(request)`` → the command's JSON-ready result (raises ``CorvidError``)
    call: Callable[[Any], Any]
    #: ``follow(session_id or None, sink)`` → a callable that ends the stream
    follow: Callable[[str | None, Sink], Callable[[], None]]
    #: each command's arguments (for query strings and the OpenAPI document)
    commands: Mapping[str, Mapping[str, ArgSpec]]
    #: ``ready()`` → ``{"store": reason|None, "cluster": reason|None}`` (None: fine)
    ready: Callable[[], dict[str, str | None]]
    #: the API tokens (in the runtime's store)
    tokens: ApiTokenStore
    #: the Prometheus text of the runtime's registry, and its content type; None: no /metrics
    metrics: Callable[[], tuple[bytes, str]] | None = None
