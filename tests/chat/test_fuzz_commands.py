"""Property: any line from any participant — commands with odd arguments, approval words,
odd Unicode, control characters — gets one of the bridge's outcomes; the bridge never
raises (an exception is an HTTP 500 on the webhook) and no credits move except by an
owner's well-formed grant."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import OWNER

OUTCOMES = {"delivered", "command", "refused", "approved", "denied", "rejected", "expired", "unclear",
            "duplicate", "ignored"}

PREFIXES = ["", "/", "/grant ", "/grant bob ", "/grant alice -", "/GRANT bob ", "/status", "/stop", "/credits",
            "/help ", "yes ", "no ", "y", "deny ", "approve ", "/grant " + "x" * 250 + " "]
ODD = st.sampled_from(["²", "\u0663", "\ufeff", "\u202e", "\x00", "\x1b[2J", "[bold]", "\ud83d\ude00", "💥",
                       "9" * 30, "0", "-1", " ", "\n", "\t", "e3"])
LINES = st.builds(lambda p, parts: p + "".join(parts), st.sampled_from(PREFIXES),
                  st.lists(st.one_of(ODD, st.text(max_size=12)), max_size=4))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(participant=st.sampled_from(["alice", "bob", OWNER]), line=LINES)
def test_any_chat_line_gets_an_answer_and_never_raises(bot, participant, line):
    rt, transport, _ = bot
    try:
        line.encode("utf-8")
        storable = "\x00" not in line
    except UnicodeEncodeError:
        storable = False
    if not storable:  # the bridge's documented refusal (the webhook answers it 400)
        with pytest.raises(ValueError, match="not valid Unicode"):
            transport.say(participant, line)
        return
    outcome = transport.say(participant, line)
    rt.settle()
    assert outcome in OUTCOMES
    for who in ("alice", "bob"):
        grants = [t for t in rt.credit_transactions(who, 1000) if t["type"] == "grant"]
        # the first-time free credits, and otherwise only an owner's grants
        assert {t["reference"] for t in grants} <= {"first_message", f"granted by {OWNER}"}
        assert sum(t["amount"] for t in grants if t["reference"] != "first_message") <= 1_000_000 * len(grants)
