"""Who answered a chat approval travels with the answer (issue 40 item 1: the journal and
the ``approval_resolved`` event name the chat user)."""

from __future__ import annotations

import re

from .conftest import say


def test_a_chat_users_yes_is_answered_as_that_user(tool_bot):
    rt, transport, _ = tool_bot
    resolved = []
    rt.subscribe_all(lambda sid, event: resolved.append(event) if event.type == "approval_resolved" else None)
    say(rt, transport, "alice", "what files do I have?")
    [request] = transport.texts("alice", kind="approval")
    approval_id = re.match(r"\[APPROVE\?:(\w+)\]", request).group(1)
    assert say(rt, transport, "alice", f"yes {approval_id}") == "approved"
    [event] = resolved
    assert (event.behavior, event.answered_by) == ("allow", "chat:alice")
