"""The store's writer thread (issue 18 item 3): acknowledged = committed, one bad request
fails alone, per-thread order, close drains, the async form never blocks, and faults
injected on the Nth write still reach the caller. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from corvid_actors.db.store import Store
from corvid_actors.db.writer import MessageWriter, WriteAck, WriterClosed, WriteTimeout
from corvid_actors.errors import StoreError, StoreUnavailableError
from corvid_actors.testing.faults import StoreFault

from .conftest import JOIN_TIMEOUT_S, run_together

WAIT_S = 10.0


def wait(acks: list[WriteAck[object]], timeout: float) -> tuple[list[WriteAck[object]], None]:
    """Wait for every acknowledgement (each at most ``timeout``); the done ones."""
    for ack in acks:
        ack.exception(timeout)
    return [a for a in acks if a.done()], None


class GatedCommit:
    """A commit function the test holds shut, so requests pile up behind it."""

    def __init__(self, bad: object = None) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.batches: list[list[object]] = []
        self.bad = bad

    def __call__(self, items: Sequence[object]) -> list[object]:
        self.entered.set()
        assert self.open.wait(WAIT_S)
        if self.bad is not None and self.bad in items:
            raise ValueError(f"bad item {self.bad!r}")
        self.batches.append(list(items))
        return [f"id-{item}" for item in items]


def test_requests_queued_behind_a_commit_share_the_next_one_and_complete_after_it():
    commit = GatedCommit()
    writer: MessageWriter[object, object] = MessageWriter(commit, max_batch=100)
    first = writer.submit_async(0)
    assert commit.entered.wait(WAIT_S)
    queued = [writer.submit_async(i) for i in range(1, 6)]
    assert not any(f.done() for f in [first, *queued])  # nothing acknowledged before its commit
    commit.open.set()
    done, _ = wait([first, *queued], timeout=WAIT_S)
    assert len(done) == 6
    assert [f.result() for f in queued] == [f"id-{i}" for i in range(1, 6)]
    assert commit.batches == [[0], [1, 2, 3, 4, 5]]
    writer.close()


def test_one_bad_request_fails_alone():
    commit = GatedCommit(bad=3)
    writer: MessageWriter[object, object] = MessageWriter(commit, max_batch=100)
    blocker = writer.submit_async(0)
    assert commit.entered.wait(WAIT_S)
    futures = [writer.submit_async(i) for i in range(1, 6)]
    commit.open.set()
    wait([blocker, *futures], timeout=WAIT_S)
    with pytest.raises(ValueError, match="bad item 3"):
        futures[2].result()
    assert [f.result() for i, f in enumerate(futures) if i != 2] == ["id-1", "id-2", "id-4", "id-5"]
    writer.close()


def test_a_batch_is_bounded_by_max_batch():
    commit = GatedCommit()
    writer: MessageWriter[object, object] = MessageWriter(commit, max_batch=2)
    futures = [writer.submit_async(0)]
    assert commit.entered.wait(WAIT_S)
    futures += [writer.submit_async(i) for i in range(1, 6)]
    commit.open.set()
    wait(futures, timeout=WAIT_S)
    assert [len(b) for b in commit.batches] == [1, 2, 2, 1]
    writer.close()


def test_close_commits_what_is_queued_then_refuses_more():
    commit = GatedCommit()
    writer: MessageWriter[object, object] = MessageWriter(commit, max_batch=100)
    futures = [writer.submit_async(i) for i in range(3)]
    assert commit.entered.wait(WAIT_S)
    closer = threading.Thread(target=writer.close)
    closer.start()
    commit.open.set()
    closer.join(JOIN_TIMEOUT_S)
    assert not closer.is_alive()
    assert [f.result(timeout=0) for f in futures] == ["id-0", "id-1", "id-2"]
    assert writer.thread is not None and not writer.thread.is_alive()
    with pytest.raises(WriterClosed):
        writer.submit_async(9)


def test_an_ack_tells_its_callbacks_and_waiters_once_committed():
    commit = GatedCommit()
    writer: MessageWriter[object, object] = MessageWriter(commit, max_batch=10)
    ack = writer.submit_async(7)
    assert commit.entered.wait(WAIT_S)
    heard: list[object] = []
    ack.add_done_callback(lambda a: heard.append((threading.current_thread() is writer.thread, a.result())))
    with pytest.raises(WriteTimeout):
        ack.result(timeout=0.01)  # not committed yet
    commit.open.set()
    assert ack.result(timeout=WAIT_S) == "id-7"
    assert heard == [(True, "id-7")]  # on the writer thread, after the commit
    ack.add_done_callback(lambda a: heard.append((threading.current_thread() is writer.thread, a.result())))
    assert heard[-1] == (False, "id-7")  # already done: at once, on the caller's thread
    writer.close()


def test_a_lone_blocking_caller_commits_on_its_own_thread():
    threads: list[threading.Thread] = []

    def commit(items: Sequence[object]) -> list[object]:
        threads.append(threading.current_thread())
        return list(items)

    writer: MessageWriter[object, object] = MessageWriter(commit, max_batch=10)
    assert [writer.submit(i) for i in range(3)] == [0, 1, 2]
    assert threads == [threading.current_thread()] * 3 and writer.thread is None
    writer.close()


def test_a_blocking_caller_queues_behind_pending_async_writes():
    """Order: a thread's async write still queued is committed before its next blocking one."""
    commit = GatedCommit()
    writer: MessageWriter[object, object] = MessageWriter(commit, max_batch=10)
    first = writer.submit_async("a")
    assert commit.entered.wait(WAIT_S)
    second = writer.submit_async("b")
    answer: list[object] = []
    blocking = threading.Thread(target=lambda: answer.append(writer.submit("c")))
    blocking.start()
    commit.open.set()
    blocking.join(JOIN_TIMEOUT_S)
    assert answer == ["id-c"] and first.result(WAIT_S) == "id-a" and second.result(WAIT_S) == "id-b"
    assert [item for batch in commit.batches for item in batch] == ["a", "b", "c"]
    writer.close()


def test_submit_on_the_writer_thread_is_refused_not_a_deadlock():
    outcome: list[BaseException] = []
    writer: MessageWriter[object, object]

    def commit(items: Sequence[object]) -> list[object]:
        if items == [0]:
            try:
                writer.submit(1)
            except RuntimeError as exc:
                outcome.append(exc)
        return list(items)

    writer = MessageWriter(commit, max_batch=10)
    assert writer.submit(0) == 0
    assert "inside a commit" in str(outcome[0])
    writer.close()


# --- through the Store ------------------------------------------------------------------


def test_acknowledged_appends_are_committed_and_visible_to_another_connection(tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    store = Store(url)
    assert store.message_writes == "writer"
    sessions = [store.create_session(name=f"s{i}").id for i in range(20)]
    acked: dict[int, tuple[str, str]] = {}
    lock = threading.Lock()

    def session_thread(sid: str):
        def run() -> None:
            futures = [(k, store.append_message_async(sid, "user", f"{sid}:{k}")) for k in range(30)]
            for k, future in futures:
                [row_id] = future.result(timeout=WAIT_S)
                with lock:
                    acked[row_id] = (sid, f"{sid}:{k}")
        return run

    assert run_together([session_thread(sid) for sid in sessions]) == []
    assert len(acked) == 20 * 30
    assert store.writer.batches < 20 * 30  # requests shared commits
    reopened = Store(url)  # a new connection sees exactly the acknowledged rows
    try:
        stored = {m.id: (m.session_id, m.content) for m in reopened.m.SessionMessage.select()}
        assert stored == acked
        for sid in sessions[:3]:  # each thread's messages in the order it queued them
            assert [c for _, c in reopened.recent_messages(sid, 100)] == [f"{sid}:{k}" for k in range(30)]
    finally:
        reopened.close()
        store.close()


def test_the_async_append_returns_before_the_commit(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'corvid.db'}")
    sid = store.create_session(name="s").id
    with store.lock:  # the writer thread waits for the store lock: nothing can commit
        future = store.append_message_async(sid, "assistant", "hello")
        assert not future.done()
    [row_id] = future.result(timeout=WAIT_S)
    assert [(m.id, m.content) for m in store.messages(sid)] == [(row_id, "hello")]
    store.close()


def test_close_commits_queued_messages(tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    store = Store(url)
    sid = store.create_session(name="s").id
    with store.lock:
        futures = [store.append_message_async(sid, "user", f"m{i}") for i in range(50)]
    store.close()
    assert all(f.done() and f.exception() is None for f in futures)
    reopened = Store(url)
    try:
        assert reopened.count_messages(sid) == 50
    finally:
        reopened.close()


def test_an_unknown_session_fails_only_its_own_append(store):
    sid = store.create_session(name="s").id
    with store.lock:  # queue all three behind the lock: they share one batch, then split
        good1 = store.append_message_async(sid, "user", "one")
        bad = store.append_message_async("no-such-session", "user", "lost")
        good2 = store.append_message_async(sid, "user", "two")
    with pytest.raises(StoreError):
        bad.result(timeout=WAIT_S)
    assert good1.result(timeout=WAIT_S) and good2.result(timeout=WAIT_S)
    assert [c for _, c in store.recent_messages(sid, 10)] == ["one", "two"]


def test_a_turn_appended_async_is_all_or_nothing(store):
    sid = store.create_session(name="s").id
    turn = store.append_messages_async([(sid, "user", "q"), (sid, "assistant", "a")])
    assert len(turn.result(timeout=WAIT_S)) == 2
    broken = store.append_messages_async([(sid, "user", "kept?"), ("no-such-session", "assistant", "x")])
    with pytest.raises(StoreError):
        broken.result(timeout=WAIT_S)
    assert [c for _, c in store.recent_messages(sid, 10)] == ["q", "a"]


def test_a_fault_injected_on_the_nth_append_reaches_that_caller_only(store):
    sid = store.create_session(name="s").id
    with StoreFault(store, "append_message", nth=2) as fault:
        results = []
        for i in range(3):
            try:
                results.append(store.append_message(sid, "user", f"m{i}"))
            except StoreUnavailableError:
                results.append(None)
    assert fault.raised == 1 and results[1] is None and None not in (results[0], results[2])
    assert [c for _, c in store.recent_messages(sid, 10)] == ["m0", "m2"]


@pytest.mark.parametrize("mode", ["writer", "group_commit", "direct"])
def test_every_write_mode_gives_the_same_rows(tmp_path, mode):
    store = Store(f"sqlite:///{tmp_path / 'corvid.db'}", message_writes=mode)
    sid = store.create_session(name="s").id
    ids = [store.append_message(sid, "user", "a"), store.append_message_async(sid, "user", "b").result(WAIT_S)[0]]
    ids += store.append_messages([(sid, "user", "c"), (sid, "assistant", "d")])
    assert ids == sorted(ids) and [c for _, c in store.recent_messages(sid, 10)] == ["a", "b", "c", "d"]
    store.close()


def test_an_unknown_write_mode_is_refused():
    with pytest.raises(ValueError, match="message_writes"):
        Store("sqlite:///:memory:", message_writes="fast")
