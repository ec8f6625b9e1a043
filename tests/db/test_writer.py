"""The store's writer thread (issue 18 item 3): acknowledged = committed, one bad request
fails alone, per-thread order, close drains, the async form never blocks, and faults
injected on the Nth write still reach the caller. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
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


def held_writer(first: object, max_batch: int, *, bad: object = None
                ) -> tuple[GatedCommit, MessageWriter[object, object], WriteAck[object]]:
    """A writer whose thread is inside the commit of ``first``, held there until
    ``commit.open`` is set: what is submitted now queues behind it."""
    commit = GatedCommit(bad)
    writer: MessageWriter[object, object] = MessageWriter(commit, max_batch=max_batch)
    ack = writer.submit_async(first)
    assert commit.entered.wait(WAIT_S)
    return commit, writer, ack


def test_requests_queued_behind_a_commit_share_the_next_one_and_complete_after_it():
    commit, writer, first = held_writer(0, 100)
    queued = [writer.submit_async(i) for i in range(1, 6)]
    assert not any(f.done() for f in [first, *queued])  # nothing acknowledged before its commit
    commit.open.set()
    done, _ = wait([first, *queued], timeout=WAIT_S)
    assert len(done) == 6
    assert [f.result() for f in queued] == [f"id-{i}" for i in range(1, 6)]
    assert commit.batches == [[0], [1, 2, 3, 4, 5]]
    writer.close()


def test_one_bad_request_fails_alone():
    commit, writer, blocker = held_writer(0, 100, bad=3)
    futures = [writer.submit_async(i) for i in range(1, 6)]
    commit.open.set()
    wait([blocker, *futures], timeout=WAIT_S)
    with pytest.raises(ValueError, match="bad item 3"):
        futures[2].result()
    assert [f.result() for i, f in enumerate(futures) if i != 2] == ["id-1", "id-2", "id-4", "id-5"]
    writer.close()


def test_a_batch_is_bounded_by_max_batch():
    commit, writer, ack = held_writer(0, 2)
    futures = [ack]
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


class CountingLock:
    """A lock that counts its acquisitions (the writer's lock, observed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acquired = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        self.acquired += got
        return got

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_queuing_behind_a_running_commit_takes_no_lock_the_callers_share():
    """200 sessions appending at once contended for the writer's lock on every message
    (1.5 context switches a message): a caller queues without it unless the writer sleeps."""
    commit = GatedCommit()
    writer: MessageWriter[object, object] = MessageWriter(commit, max_batch=1000)
    lock = CountingLock()
    writer._cond = threading.Condition(lock)  # type: ignore[assignment]  # observed, not replaced
    first = writer.submit_async(0)
    assert commit.entered.wait(WAIT_S)  # the writer is busy committing [0]
    before = lock.acquired
    acks = [writer.submit_async(i) for i in range(1, 501)]
    assert lock.acquired == before  # none of the 500 took it
    commit.open.set()
    assert first.result(timeout=WAIT_S) == "id-0"
    assert [a.result(timeout=WAIT_S) for a in acks] == [f"id-{i}" for i in range(1, 501)]
    assert commit.batches == [[0], list(range(1, 501))]  # and they shared the next commit
    writer.close()


def close_during_submits() -> tuple[list[object], dict[object, WriteAck[object] | None]]:
    """Four threads submit (up to 3,000 each) and the writer is closed once its first batch
    has committed: what was committed, and each submit's ack (None: refused)."""
    committed: list[object] = []

    def commit(items: Sequence[object]) -> list[object]:
        committed.extend(items)
        return [f"id-{item}" for item in items]

    writer: MessageWriter[object, object] = MessageWriter(commit, max_batch=7)
    outcomes: dict[object, WriteAck[object] | None] = {}
    go = threading.Barrier(5, timeout=WAIT_S)

    def submitter(k: int) -> None:
        go.wait()
        for j in range(3000):
            try:
                outcomes[(k, j)] = writer.submit_async((k, j))
            except WriterClosed:
                outcomes[(k, j)] = None
                return

    threads = [threading.Thread(target=submitter, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    go.wait()
    deadline = time.monotonic() + WAIT_S
    while not committed and time.monotonic() < deadline:
        time.sleep(0.0005)
    writer.close()  # while the callers are still submitting
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
        assert not thread.is_alive()
    return committed, outcomes


def test_submits_racing_close_are_each_committed_once_or_refused_never_lost():
    """Callers queue without the writer's lock, so a close can come between a caller's
    check and its append: each write is then committed once, or refused — never lost."""
    refused_mid_stream = 0
    for _ in range(20):
        committed, outcomes = close_during_submits()
        refused_mid_stream += any(a is None for a in outcomes.values())
        for item, ack in outcomes.items():
            if ack is None:
                assert item not in committed
            else:
                assert ack.result(timeout=WAIT_S) == f"id-{item}"  # a lost one times out here
        assert sorted(committed) == sorted(i for i, a in outcomes.items() if a is not None)  # each once
    assert refused_mid_stream  # the close did come while callers were submitting


def test_several_threads_may_wait_for_one_write():
    commit, writer, ack = held_writer(3, 10)
    got: list[object] = []
    ready = threading.Barrier(4, timeout=WAIT_S)

    def wait_for_it() -> None:
        ready.wait()
        got.append(ack.result(timeout=WAIT_S))  # one that is never woken times out

    waiters = [threading.Thread(target=wait_for_it) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    ready.wait()
    time.sleep(0.05)  # all three are in result() before the commit ends
    commit.open.set()
    for waiter in waiters:
        waiter.join(JOIN_TIMEOUT_S)
    assert got == ["id-3"] * 3
    writer.close()


def test_an_ack_tells_its_callbacks_and_waiters_once_committed():
    commit, writer, ack = held_writer(7, 10)
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
    commit, writer, first = held_writer("a", 10)
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
