"""The chat bridge's conversation directory remembers a bounded number of sessions (issue 21):
a daemon churns sessions for months, and the bridge hears events of every one of them."""

from __future__ import annotations

from corvid_actors.chat.conversations import ConversationDirectory

CAP = 10


def test_sessions_of_others_are_remembered_up_to_the_bound(runtime):
    directory = ConversationDirectory(runtime, "chat:bot", agent_id=None, project_id=None, remembered_sessions=CAP)
    others = [runtime.create_session(source="web").id for _ in range(3 * CAP)]
    for sid in others:
        assert directory.of_session(sid) is None
    assert directory.remembered_sessions == CAP
    assert all(directory.known_foreign(sid) for sid in others[-CAP:])
    assert not directory.known_foreign(others[0])  # forgotten: its next event costs a store read
    assert directory.of_session(others[0]) is None and directory.known_foreign(others[0])
    assert directory.remembered_sessions == CAP


def test_the_bridges_own_conversations_survive_being_forgotten(runtime):
    directory = ConversationDirectory(runtime, "chat:bot", agent_id=None, project_id=None, remembered_sessions=CAP)
    mine = [directory.open("room", f"user{i}") for i in range(2 * CAP)]
    for _ in range(CAP):
        directory.of_session(runtime.create_session(source="web").id)
    assert directory.remembered_sessions == CAP
    assert directory.of_session(mine[0].session_id) == mine[0]  # read back from the store
    assert directory.find("room", "user0") == mine[0]

