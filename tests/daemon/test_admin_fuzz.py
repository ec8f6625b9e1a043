"""Property-based fuzzing of the admin request validator and the socket: random JSON
values, odd Unicode (lone surrogates, NUL, RTL marks), huge and non-finite numbers,
nested structures. Every input passes validation with well-formed values or is rejected
with an error reply; nothing else is ever raised, and the connection stays usable."""

from __future__ import annotations

import json
import math
import socket

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corvid_actors.daemon.protocol import (
    COMMANDS,
    RequestRejected,
    encode,
    error_reply,
    is_text,
    parse_request,
)
from corvid_actors.daemon.socket_server import AdminSocketServer, SocketSettings

ODD_TEXT = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=st.characters(codec=None, categories=None), max_size=20),  # surrogates included
    st.sampled_from(["\ud800", "\udfff", "a\x00b", "\u202e", "\ufeff", "", " ", "abcd", "x" * 300]),
)
NUMBERS = st.one_of(st.integers(), st.integers(min_value=-(10**400), max_value=10**400),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, -1, 1, 2**53 + 1, 1e308]))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, ODD_TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(ODD_TEXT, inner, max_size=3)),
                      max_leaves=10)
ARG_NAMES = sorted({name for spec in COMMANDS.values() for name in spec})


@st.composite
def requests(draw) -> dict:
    cmd = draw(st.one_of(st.sampled_from(sorted(COMMANDS)), ODD_TEXT, VALUES))
    names = st.one_of(st.sampled_from(ARG_NAMES), ODD_TEXT)
    request = {"cmd": cmd, "args": draw(st.one_of(st.dictionaries(names, VALUES, max_size=4), VALUES))}
    for key in ("id", "token", "extra"):
        if draw(st.booleans()):
            request[key] = draw(VALUES)
    return request


def as_line(request) -> bytes:
    # ensure_ascii keeps lone surrogates as \ud800 escapes; NaN/Infinity come out as tokens
    return json.dumps(request).encode() + b"\n"


def check(line: bytes, token: str) -> None:
    try:
        parsed = parse_request(line, token=token)
    except RequestRejected as exc:
        encode(error_reply(exc.request_id, exc.code, exc.message)).decode("utf-8")  # a valid reply
        return
    for value in parsed.args.values():
        if isinstance(value, str):
            assert is_text(value)
        elif isinstance(value, float):
            assert math.isfinite(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            assert abs(value) <= 10**9
    encode({"id": parsed.id, "ok": True}).decode("utf-8")


@settings(max_examples=400, deadline=None)
@given(request=requests(), token=st.sampled_from(["", "s3cret"]))
def test_the_validator_accepts_well_formed_values_or_rejects(request, token):
    check(as_line(request), token)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_raw_bytes_are_accepted_or_rejected(data):
    check(data, "")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests())
def test_the_server_answers_every_line_and_keeps_the_connection(tmp_path_factory, request):
    path = tmp_path_factory.mktemp("fuzz") / "a.sock"
    server = AdminSocketServer(path, lambda r: {"cmd": r.cmd}, lambda s, sink: (lambda: None), SocketSettings())
    server.start()
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2)
            sock.connect(str(path))
            replies = sock.makefile("rb")
            sock.sendall(as_line(request))
            first = json.loads(replies.readline())
            assert first["ok"] in (True, False)
            if request.get("cmd") == "follow" and first["ok"]:
                return  # a follower stream: nothing more is read on it
            sock.sendall(b'{"id": "after", "cmd": "health"}\n')
            assert json.loads(replies.readline()) == {"id": "after", "ok": True, "result": {"cmd": "health"}}
    finally:
        server.close()
