"""The admin protocol: JSON lines, one object per line in each direction, every request checked.

    request  {"cmd": "sessions", "args": {"status": "running"}, "id": 7, "token": "..."}
    reply    {"id": 7, "ok": true, "result": [...]}
             {"id": 7, "ok": false, "error": {"code": "bad_request", "message": "..."}}

``args``, ``id`` and ``token`` are optional (``token`` is required when the daemon has
one). :func:`parse_request` checks a line against :data:`COMMANDS` — garbage, unknown
commands, unknown or missing arguments, wrong types and out-of-range values are all
rejected with a reason — before anything reaches the AdminActor. Every string must be
valid Unicode without NUL (a lone surrogate such as ``"\ud800"`` is refused), every
number finite and inside its range; ``NaN``/``Infinity`` are not JSON. ``follow`` replies once and then streams
``{"session_id": ..., "at": ..., "event": {...}}`` lines (and ``{"dropped": n}`` when a
slow reader lost events) until a last ``{"end": reason}`` line. Pure functions, no I/O.
"""

from __future__ import annotations

import hmac
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from corvid_actors.core.vocabulary import AGENT_KINDS, CONVERSATION_MODES
from corvid_actors.db.statuses import SESSION_STATUSES
from corvid_actors.errors import BAD_REQUEST, UNAUTHORIZED, UNKNOWN_COMMAND, AdminError


@dataclass(frozen=True)
class Arg:
    """One argument of a command: its JSON type, whether it is required, and a range rule."""

    kind: str  # "str" | "int" | "number" | "bool"
    required: bool = False
    check: Callable[[Any], bool] | None = None
    must: str = ""


#: longest name / id argument (session, agent, participant, approval …): the columns' size
MAX_NAME_CHARS = 200
#: largest count argument (limit, events, messages, transactions)
MAX_COUNT = 1_000_000
#: largest ``extend`` in minutes (the AdminActor caps the timeout further)
MAX_EXTEND_MINUTES = 100_000
#: largest credit amount (the ledger's MAX_CREDIT_AMOUNT; the daemon's max_credit_grant is lower)
MAX_CREDITS = 1_000_000_000
#: longest ``history`` look-back in seconds (a year)
MAX_HISTORY_S = 366 * 86400
#: largest page of ``sessions_page``
MAX_PAGE = 1000
#: longest ``sessions_page`` cursor (an opaque string the previous page gave)
MAX_CURSOR_CHARS = 400
#: the request ``id`` is an integer of at most this magnitude (exact in JSON everywhere)
MAX_REQUEST_ID = 2**53


def _text(required: bool = False, max_chars: int | None = MAX_NAME_CHARS) -> Arg:
    if max_chars is None:
        return Arg("str", required, lambda v: bool(v.strip()), "must not be empty")
    return Arg("str", required, lambda v: bool(v.strip()) and len(v) <= max_chars,
               f"must not be empty and at most {max_chars} characters")


def _note(max_chars: int = 4000) -> Arg:
    return Arg("str", False, lambda v: len(v) <= max_chars, f"must be at most {max_chars} characters")


def _positive(kind: str, required: bool = True, high: int = MAX_COUNT) -> Arg:
    return Arg(kind, required, lambda v: 0 < v <= high, f"must be > 0 and at most {high}")


def _usd() -> Arg:
    return Arg("number", False, lambda v: v >= 0, "must be >= 0 (0: no cap)")


_SESSION = _text(required=True)
#: what ``start --create`` may set on a new agent
AGENT_PROVIDERS = ("ollama", "anthropic")
PERMISSION_MODES = ("default", "plan", "auto-edit", "full-auto")

#: every command the socket accepts, with its arguments
COMMANDS: Mapping[str, Mapping[str, Arg]] = {
    "health": {},
    "stats": {},
    "agents": {},
    "sessions": {"status": Arg("str", False, lambda v: v in SESSION_STATUSES,
                               f"must be one of {', '.join(SESSION_STATUSES)}"),
                 "limit": _positive("int", required=False)},
    # the HTTP API's sessions page (keyset paging: ``cursor`` is the previous page's next_cursor)
    "sessions_page": {"status": Arg("str", False, lambda v: v in SESSION_STATUSES,
                                    f"must be one of {', '.join(SESSION_STATUSES)}"),
                      "agent": _text(), "source": _text(), "q": _text(),
                      "limit": _positive("int", required=False, high=MAX_PAGE),
                      "cursor": _text(max_chars=MAX_CURSOR_CHARS)},
    "session": {"session": _SESSION, "events": _positive("int", required=False),
                "messages": _positive("int", required=False)},
    "start": {"agent": _text(required=True), "prompt": _text(required=True, max_chars=None), "source": _text(),
              "name": _note(MAX_NAME_CHARS), "participant": _note(MAX_NAME_CHARS), "create": Arg("bool"),
              "provider": Arg("str", False, lambda v: v in AGENT_PROVIDERS,
                          f"must be one of {', '.join(AGENT_PROVIDERS)}"),
              "model": _text(),
              "permission_mode": Arg("str", False, lambda v: v in PERMISSION_MODES,
                                     f"must be one of {', '.join(PERMISSION_MODES)}"),
              "kind": Arg("str", False, lambda v: v in AGENT_KINDS, f"must be one of {', '.join(AGENT_KINDS)}"),
              "conversation_mode": Arg("str", False, lambda v: v in CONVERSATION_MODES,
                                       f"must be one of {', '.join(CONVERSATION_MODES)}"),
              "max_budget_usd": _usd(), "max_total_budget_usd": _usd()},
    "send": {"session": _SESSION, "text": _text(required=True, max_chars=None)},
    "stop": {"session": _SESSION},
    "resume": {"session": _SESSION},
    "extend": {"session": _SESSION, "minutes": _positive("number", high=MAX_EXTEND_MINUTES)},
    "approvals": {"session": _text()},
    "approve": {"approval": _text(required=True), "session_wide": Arg("bool"), "message": _note()},
    "deny": {"approval": _text(required=True), "message": _note()},
    "mode": {"mode": _text()},
    "credits_balance": {"participant": _text(required=True), "transactions": _positive("int", required=False)},
    "credits_grant": {"participant": _text(required=True), "amount": _positive("int", high=MAX_CREDITS),
                      "reason": _note(MAX_NAME_CHARS)},
    "shutdown": {"reason": _text(max_chars=4000)},
    "drain": {},
    "rebalance": {"daemon": _text()},
    "follow": {"session": _text()},
    "history": {"session": _SESSION, "since_s": _positive("number", required=False, high=MAX_HISTORY_S),
                "tail": _positive("int", required=False)},
    "restart": {"session": _SESSION},
    "crash": {"session": _SESSION},
}


@dataclass(frozen=True)
class Request:
    """A checked request: a known command with well-typed arguments."""

    cmd: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str | int | None = None
    #: who sent it, as the transport knows (never read from the request): ``admin:<user>``
    #: on the admin socket (its peer's uid), ``http:<token name>`` on the HTTP API
    caller: str = ""


class RequestRejected(AdminError):
    """The request itself is invalid; carries the request id when one could be read."""

    def __init__(self, code: str, message: str, request_id: str | int | None = None) -> None:
        super().__init__(code, message)
        self.request_id = request_id


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        # an int is finite (math.isfinite(10**400) would raise OverflowError); the range
        # check bounds its size
        return not isinstance(value, bool) and (
            isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)))
    raise ValueError(f"unknown argument kind {kind!r}")  # pragma: no cover - a table typo


def is_text(value: str) -> bool:
    """Valid Unicode without NUL: encodable as UTF-8 (no lone surrogates, which JSON's
    ``\\udXXX`` escapes can carry) and storable in every database's text columns."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


_NOT_TEXT = "must be valid Unicode text without NUL characters (lone surrogates are not text)"
_KIND_NAMES = {"str": "a string", "bool": "true or false", "int": "an integer", "number": "a number"}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _request_id(data: dict[str, Any]) -> str | int | None:
    value = data.get("id")
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= MAX_NAME_CHARS and is_text(value):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_REQUEST_ID:
        return value
    raise RequestRejected(BAD_REQUEST, f'"id" must be a string of at most {MAX_NAME_CHARS} characters '
                                       f"or an integer of at most 2**53")


def parse_request(line: bytes, *, token: str = "") -> Request:
    """Check one request line; raises :class:`RequestRejected` saying what is wrong.

    A pure function: the same line always gives the same answer.
    """
    data = parse_object(line, 'send one object per line, e.g. {"cmd": "health"}')
    request_id = _request_id(data)
    unknown = set(data) - {"cmd", "args", "id", "token"}
    if unknown:
        raise RequestRejected(BAD_REQUEST, f"unknown request field(s): {', '.join(sorted(unknown))}", request_id)
    if token:
        given = data.get("token")
        # compare bytes: compare_digest refuses non-ASCII str, and a lone surrogate cannot
        # even be encoded — both are simply a wrong token
        if not isinstance(given, str) or not is_text(given) or not hmac.compare_digest(
                given.encode(), token.encode()):
            raise RequestRejected(UNAUTHORIZED, "a valid admin token is required (CORVID_ADMIN_TOKEN)",
                                  request_id)
    cmd = data.get("cmd")
    if not isinstance(cmd, str):
        raise RequestRejected(BAD_REQUEST, '"cmd" must be a string naming a command', request_id)
    args = data.get("args", {})
    if args is None:
        args = {}
    return check_command(cmd, args, request_id)


def parse_object(raw: bytes, example: str = 'e.g. {"cmd": "health"}') -> dict[str, Any]:
    """``raw`` read as one JSON object (UTF-8, no ``NaN``/``Infinity``), else
    :class:`RequestRejected` ``bad_request`` saying why; ``example`` ends the message of
    a body that is not JSON. The admin socket reads each line so, the HTTP API each body."""
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise RequestRejected(BAD_REQUEST, "request is not UTF-8 text") from None
    except (ValueError, RecursionError):
        raise RequestRejected(BAD_REQUEST, f"request is not valid JSON: {example}") from None
    if not isinstance(data, dict):
        raise RequestRejected(BAD_REQUEST, f"request must be a JSON object, {example}")
    return data


def check_command(cmd: str, args: Any, request_id: str | int | None = None) -> Request:
    """Check command ``cmd`` with ``args`` against :data:`COMMANDS` (both transports, the
    admin socket and the HTTP API, go through here); raises :class:`RequestRejected`."""
    spec = COMMANDS.get(cmd)
    if spec is None:
        known = ", ".join(sorted(COMMANDS))
        # ascii(): the reply must be valid UTF-8 even for a cmd that is not text
        raise RequestRejected(UNKNOWN_COMMAND, f"unknown command {ascii(cmd[:64])}; known: {known}", request_id)
    if not isinstance(args, dict):
        raise RequestRejected(BAD_REQUEST, '"args" must be a JSON object', request_id)
    return Request(cmd, _check_args(cmd, spec, args, request_id), request_id)


def _check_args(cmd: str, spec: Mapping[str, Arg], args: dict[str, Any], request_id: Any) -> dict[str, Any]:
    extra = set(args) - set(spec)
    if extra:
        allowed = ", ".join(spec) or "none"
        raise RequestRejected(BAD_REQUEST, f"{cmd}: unknown argument(s) {', '.join(sorted(extra))} "
                                           f"(allowed: {allowed})", request_id)
    checked: dict[str, Any] = {}
    for name, arg in spec.items():
        if name not in args or args[name] is None:
            if arg.required:
                raise RequestRejected(BAD_REQUEST, f"{cmd}: argument {name!r} is required", request_id)
            continue
        value = args[name]
        if not _type_ok(arg.kind, value):
            raise RequestRejected(BAD_REQUEST, f"{cmd}: argument {name!r} must be {_KIND_NAMES[arg.kind]}, "
                                               f"got {_json_type(value)}", request_id)
        if arg.kind == "str" and not is_text(value):
            raise RequestRejected(BAD_REQUEST, f"{cmd}: argument {name!r} {_NOT_TEXT}", request_id)
        if arg.check is not None and not arg.check(value):
            raise RequestRejected(BAD_REQUEST, f"{cmd}: argument {name!r} {arg.must}", request_id)
        checked[name] = value
    return checked


def _json_type(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "a number out of range"
    return type(value).__name__


def ok_reply(request_id: Any, result: Any) -> dict[str, Any]:
    """A success reply to request ``request_id``."""
    return {"id": request_id, "ok": True, "result": result}


def error_reply(request_id: Any, code: str, message: str) -> dict[str, Any]:
    """An error reply: ``code`` is one of the admin error codes of :mod:`corvid_actors.errors`."""
    return {"id": request_id, "ok": False, "error": {"code": code, "message": message}}


def encode(message: Mapping[str, Any]) -> bytes:
    """One JSON line (values JSON cannot hold are written as strings)."""
    return json.dumps(message, default=str, separators=(",", ":")).encode("utf-8") + b"\n"
