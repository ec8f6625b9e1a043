"""Property: whatever passes the request validator, the AdminActor answers with a result
or an AdminError/CorvidError (an error reply) — never another exception, which the socket
would report as ``internal`` with a traceback in the daemon's log."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corvid_actors.daemon.protocol import COMMANDS, RequestRejected, parse_request
from corvid_actors.errors import CorvidError

from .test_admin_actor import command, make

TEXT = st.one_of(st.text(max_size=30), st.sampled_from(["helper", "chat", "web", "agent", "normal", "queued",
                                                       "paused", "%", "_", "abcd", "[/bad]", "é💥", "\u202e",
                                                       "x" * 200]))
VALUE = st.one_of(TEXT, st.integers(min_value=-5, max_value=2_000_000), st.floats(min_value=-5, max_value=1e6),
                  st.booleans(), st.none())
FUZZED = sorted(set(COMMANDS) - {"shutdown", "follow"})


@pytest.fixture
def admin_rt(sim_clock, scripted, tmp_path):
    rt, admin = make(sim_clock, scripted, tmp_path, credits=True)
    yield rt, admin
    admin.stop()
    rt.shutdown()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_validated_requests_never_raise_unexpected_errors(admin_rt, data):
    rt, admin = admin_rt
    cmd = data.draw(st.sampled_from(FUZZED))
    names = sorted(COMMANDS[cmd])
    args = {name: data.draw(VALUE) for name in names if data.draw(st.booleans())}
    try:
        request = parse_request(json.dumps({"cmd": cmd, "args": args}).encode())
    except RequestRejected:
        return
    try:
        command(admin, request.cmd, **request.args)
    except CorvidError:
        pass
    rt.settle()
