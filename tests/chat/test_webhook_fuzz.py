"""Property-based fuzzing of the webhook's parsers: random signature headers, random JSON
bodies with odd Unicode, huge numbers and nesting. Every input is accepted or answered
with a JSON error status; the transport never raises and never hands the bridge a
message it could not store."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from corvid_actors.chat import WebhookTransport
from corvid_actors.chat.signatures import SignatureError, sign, verify
from corvid_actors.db.replays import MemoryReplayStore

SECRET = "fuzz-secret"
NOW = 1_800_000_000

ODD_TEXT = st.one_of(st.text(max_size=20), st.text(alphabet=st.characters(codec=None), max_size=20),
                     st.sampled_from(["\ud800", "a\x00b", "\u202e", "x" * 300, "", "/grant bob 5", "yes"]))
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
              st.floats(allow_nan=False), ODD_TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(ODD_TEXT, inner, max_size=3)),
    max_leaves=10)
BODIES = st.one_of(
    st.fixed_dictionaries({"channel": VALUES, "participant": VALUES, "text": VALUES},
                          optional={"id": VALUES, "extra": VALUES}),
    VALUES,
)


@settings(max_examples=300, deadline=None)
@given(header=st.one_of(st.none(), st.text(max_size=200), st.builds(
    lambda t, v: f"t={t},v1={v}", st.one_of(st.integers(), st.text(max_size=12)), st.text(max_size=70))))
def test_any_signature_header_is_verified_or_refused(header):
    try:
        verify(SECRET, b"{}", header, now=NOW)
    except SignatureError as exc:
        assert str(exc)
    else:
        raise AssertionError(f"a random header verified: {header!r}")


class Recorder:
    def __init__(self) -> None:
        self.messages: list = []

    def __call__(self, message) -> str:
        for value in (message.channel, message.participant, message.text, message.message_id):
            value.encode("utf-8")  # the bridge gets only storable text
            assert "\x00" not in value
        self.messages.append(message)
        return "delivered"


# only the request parser (_incoming) is exercised: no server is started
TRANSPORT = WebhookTransport("http://127.0.0.1:9/unused", secret=SECRET, replays=MemoryReplayStore())
TRANSPORT._handler = Recorder()


@settings(max_examples=150, deadline=None)
@given(payload=BODIES, signed=st.booleans())
def test_any_body_is_accepted_or_answered_with_a_json_error(payload, signed):
    body = json.dumps(payload).encode()
    now = int(datetime.now(UTC).timestamp())
    header = sign(SECRET, body, now) if signed else None
    status, answer = TRANSPORT._incoming(body, header)
    assert status in (202, 400, 401, 409)
    json.dumps(answer).encode("utf-8")
    if status == 202:
        assert answer == {"accepted": True, "outcome": "delivered"}
    if not signed:
        assert status == 401


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=300))
def test_any_bytes_are_answered(body):
    status, _ = TRANSPORT._incoming(body, sign(SECRET, body, int(datetime.now(UTC).timestamp())))
    assert status in (202, 400, 409)
