"""The chat bridge's conversation directory remembers a bounded number of sessions (issue 21):
a daemon churns sessions for months, and the bridge hears events of every one of them."""

from __future__ import annotations

import threading
import time

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



def test_conversations_and_their_locks_are_remembered_up_to_the_bound(runtime):
    # A bot meets a million users over months: what it keeps per conversation is bounded too.
    directory = ConversationDirectory(runtime, "chat:bot", agent_id=None, project_id=None, remembered_sessions=CAP)
    opened = []
    for i in range(5 * CAP):
        with directory.lock_for("room", f"user{i}"):
            opened.append(directory.open("room", f"user{i}"))
    assert directory.remembered_conversations <= CAP
    assert directory.conversation_locks == 0  # nobody holds one: none is kept
    # a forgotten conversation is found again (one store read), never opened twice
    assert directory.find("room", "user0") == opened[0]
    assert directory.open("room", "user1") == opened[1]
    assert directory.remembered_conversations <= CAP


def test_a_conversation_lock_is_one_lock_while_anyone_holds_or_waits_for_it(runtime):
    directory = ConversationDirectory(runtime, "chat:bot", agent_id=None, project_id=None, remembered_sessions=CAP)
    order = []
    first_in = threading.Event()
    release = threading.Event()

    def holder():
        with directory.lock_for("room", "alice"):
            order.append("first in")
            first_in.set()
            release.wait(5)
            order.append("first out")

    def waiter():
        first_in.wait(5)
        with directory.lock_for("room", "alice"):
            order.append("second in")

    threads = [threading.Thread(target=holder), threading.Thread(target=waiter)]
    for t in threads:
        t.start()
    assert first_in.wait(5)
    time.sleep(0.05)  # the waiter reaches the lock while the first holds it (real time, bounded)
    assert directory.conversation_locks == 1
    release.set()
    for t in threads:
        t.join(5)
    assert order == ["first in", "first out", "second in"]
    assert directory.conversation_locks == 0
