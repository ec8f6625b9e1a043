"""A reply and its turn's close commit together: a crash between them cannot happen.

Issue 36 item 2's last gap: the assistant's reply row and the decrement of
``sessions.open_turns`` were two writes; a ``kill -9`` between them made the next owner's
resume (which answers every open turn) answer the message a second time
(tests/cluster/test_daemon_moves.py: 4 messages, 5 replies).

Given a session whose turn's reply is committed and whose turn's usage write then fails
(the state a kill right after the reply's commit leaves),
When the runtime is killed and a second one over the same store resumes the session,
Then the turn is found closed and nothing is answered again: one reply per user message,
counted in the store. And a kill before the reply's commit still gets the message
answered, once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corvid_actors.db.store import Store
from corvid_actors.testing import StoreFault, Turn, kill_runtime, sim_runtime
from tests.db.conftest import pg_database_url, pg_url  # noqa: F401 - fixtures

BACKENDS = ["sqlite-memory", "sqlite-file", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def shared_store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:
    """One store both runtimes use, as a daemon and its successor share a database (an
    in-memory database lives as long as the store object, so it is shared as an object)."""
    if request.param == "sqlite-memory":
        url = "sqlite:///:memory:"
    elif request.param == "sqlite-file":
        url = f"sqlite:///{tmp_path / 'corvid.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    store = Store(url)
    yield store
    store.close()


def replies(store: Store, sid: str) -> list[str]:
    return [m.content for m in store.messages(sid) if m.role == "assistant"]


def users(store: Store, sid: str) -> list[str]:
    return [m.content for m in store.messages(sid) if m.role == "user"]


def test_a_kill_right_after_the_reply_commit_finds_the_turn_closed(sim_clock, scripted, shared_store):
    first = sim_runtime(sim_clock, scripted, store=shared_store)
    sid = first.create_session(source="web").id
    scripted.for_session(sid, Turn.reply("the only answer", latency_s=5), Turn.reply("answered twice"))
    first.start_process(sid, "what is 2+2?")
    # the turn's usage write fails (and waits for its retry): the reply is committed, and
    # nothing after it — as when the daemon is killed between the two
    fault = StoreFault(first, "add_session_usage", times=None)
    sim_clock.advance(10)
    first.settle()
    assert fault.raised >= 1
    assert replies(shared_store, sid) == ["the only answer"]
    kill_runtime(first)
    fault.clear()

    second = sim_runtime(sim_clock, scripted, store=shared_store)
    try:
        assert shared_store.get_session(sid).open_turns == 0
        second.resume_pending_sessions()
        second.settle()
        sim_clock.advance(10)
        second.settle()
        assert replies(shared_store, sid) == ["the only answer"]  # exactly one reply per message
        assert scripted.remaining(sid) == 1  # the model was not called again
    finally:
        second.shutdown()


def test_a_kill_after_the_first_of_two_queued_replies_answers_only_the_second(sim_clock, scripted, shared_store):
    # the cluster test's shape: messages queued behind a running turn, the owner killed
    # between a reply's commit and its usage write
    first = sim_runtime(sim_clock, scripted, store=shared_store)
    sid = first.create_session(source="web").id
    scripted.for_session(sid, Turn.reply("to one", latency_s=5), Turn.reply("to two, lost with the kill"),
                         Turn.reply("to two"), Turn.reply("spare"))
    first.start_process(sid, "one")
    sim_clock.advance(1)
    assert first.send_message(sid, "two") is True  # waits behind "one"'s turn
    fault = StoreFault(first, "add_session_usage", times=None)
    sim_clock.advance(10)
    first.settle()
    # "two"'s turn ran; its reply waits behind the failed write and dies with the runtime
    assert replies(shared_store, sid) == ["to one"]
    assert scripted.remaining(sid) == 2
    kill_runtime(first)
    fault.clear()

    second = sim_runtime(sim_clock, scripted, store=shared_store)
    try:
        assert shared_store.get_session(sid).open_turns == 1  # "two"'s turn only
        second.resume_pending_sessions()
        second.settle()
        sim_clock.advance(10)
        second.settle()
        assert users(shared_store, sid) == ["one", "two"]
        assert replies(shared_store, sid) == ["to one", "to two"]  # one reply per message
        assert shared_store.get_session(sid).open_turns == 0
        assert scripted.remaining(sid) == 1
    finally:
        second.shutdown()


def test_a_kill_before_the_reply_commit_still_answers_once(sim_clock, scripted, shared_store):
    first = sim_runtime(sim_clock, scripted, store=shared_store)
    sid = first.create_session(source="web").id
    scripted.for_session(sid, Turn.reply("never stored", latency_s=5), Turn.reply("answered after the restart"),
                         Turn.reply("spare"))
    first.start_process(sid, "what is 2+2?")
    first.settle()
    # the reply's write fails (and waits for its retry): nothing of the turn's end is stored
    fault = StoreFault(first, "append_message", times=None)
    sim_clock.advance(10)
    first.settle()
    assert fault.raised >= 1
    assert replies(shared_store, sid) == []
    kill_runtime(first)
    fault.clear()

    second = sim_runtime(sim_clock, scripted, store=shared_store)
    try:
        assert shared_store.get_session(sid).open_turns == 1
        second.resume_pending_sessions()
        second.settle()
        sim_clock.advance(10)
        second.settle()
        assert replies(shared_store, sid) == ["answered after the restart"]
        assert shared_store.get_session(sid).open_turns == 0
        assert scripted.remaining(sid) == 1
    finally:
        second.shutdown()
