"""The JSON API's routes: each one an admin command (issue 39 item 2).

:data:`API_ROUTES` is the contract (``ROUTES.md`` describes it for people, the OpenAPI
document is made from it): the method, the path, the admin command it runs, where the
command's arguments come from (the path, the query string or a JSON body), and whether
it changes anything (then a ``read`` token is refused).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: the API's prefix
PREFIX = "/api/v1"


@dataclass(frozen=True)
class ApiRoute:
    """One route of the API."""

    method: str
    path: str
    command: str
    summary: str
    #: path parameter → the command's argument it fills
    path_args: dict[str, str] = field(default_factory=dict)
    #: the arguments come from a JSON body (else from the query string)
    body: bool = False
    #: body field → the command's argument (``message`` is ``start``'s ``prompt``)
    renames: dict[str, str] = field(default_factory=dict)

    @property
    def mutating(self) -> bool:
        """It changes something: an ``operate`` token is needed."""
        return self.method != "GET"


def _session(method: str, tail: str, command: str, summary: str, body: bool = False) -> ApiRoute:
    return ApiRoute(method, f"{PREFIX}/sessions/{{session_id}}{tail}", command, summary,
                    {"session_id": "session"}, body)


API_ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute("GET", f"{PREFIX}/sessions", "sessions_page",
             "Sessions, most recently active first; filter by status, agent, source and q; "
             "page with next_cursor"),
    ApiRoute("POST", f"{PREFIX}/sessions", "start", "Start a session of an agent with a first message",
             body=True, renames={"message": "prompt"}),
    _session("GET", "", "session", "One session in detail (as `admin session`)"),
    _session("GET", "/history", "history", "A session's recent history (stored messages and events)"),
    _session("POST", "/messages", "send", "Send a message to a session", body=True),
    _session("POST", "/stop", "stop", "Stop a session", body=True),
    _session("POST", "/resume", "resume", "Resume a stopped session", body=True),
    _session("POST", "/restart", "restart", "Stop and resume a session with its history", body=True),
    _session("POST", "/extend", "extend", "Extend a session's timeout by some minutes", body=True),
    ApiRoute("GET", f"{PREFIX}/approvals", "approvals", "Pending tool approvals (of one session with ?session=)"),
    ApiRoute("POST", f"{PREFIX}/approvals/{{approval_id}}/approve", "approve", "Approve a pending tool call",
             {"approval_id": "approval"}, body=True),
    ApiRoute("POST", f"{PREFIX}/approvals/{{approval_id}}/deny", "deny", "Deny a pending tool call",
             {"approval_id": "approval"}, body=True),
    ApiRoute("GET", f"{PREFIX}/mode", "mode", "The operational mode"),
    ApiRoute("PUT", f"{PREFIX}/mode", "mode", "Set the operational mode", body=True),
    ApiRoute("GET", f"{PREFIX}/credits", "credits_balance", "A participant's credit balance (?participant=)"),
    ApiRoute("GET", f"{PREFIX}/health", "health", "The daemon's health: store, sandbox, cluster, slots"),
    ApiRoute("GET", f"{PREFIX}/stats", "stats", "The runtime's counters"),
    ApiRoute("GET", f"{PREFIX}/agents", "agents", "The agents"),
)

#: the event streams (text/event-stream; see corvid_actors.http.sse)
EVENT_ROUTES = (f"{PREFIX}/events", f"{PREFIX}/sessions/{{session_id}}/events")
