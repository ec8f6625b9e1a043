"""Group commit: concurrent appends share commits, and each is acknowledged only once durable.

The committer is tested with a gate: the first caller's commit is held until the others
have queued (the ``on_queued`` hook tells when), so which items share a batch is exact,
not a matter of thread timing. The store tests check what callers rely on: ids, order,
atomicity, isolation of a bad row, durability across a new connection.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from corvid_actors.db.group_commit import GroupCommitter
from corvid_actors.db.message_batches import MAX_ROWS_PER_STATEMENT
from corvid_actors.db.store import Store
from corvid_actors.errors import StoreError
from tests.db.conftest import JOIN_TIMEOUT_S, run_together

WAIT_S = 5.0  # real seconds; every wait below ends as soon as its condition holds


class GatedCommit:
    """A commit function whose first call blocks until ``release()``; records every batch."""

    def __init__(self, fail_on: object = None) -> None:
        self.batches: list[list[object]] = []
        self.entered = threading.Event()
        self._gate = threading.Event()
        self._fail_on = fail_on

    def __call__(self, items: Sequence[object]) -> list[object]:
        self.batches.append(list(items))
        if len(self.batches) == 1:
            self.entered.set()
            assert self._gate.wait(WAIT_S), "the test never released the gate"
        if self._fail_on is not None and self._fail_on in items:
            raise ValueError(f"bad item {self._fail_on!r}")
        return [f"ok:{item}" for item in items]

    def release(self) -> None:
        self._gate.set()


def submit_all(committer: GroupCommitter, items: list[object], queued: threading.Event) -> dict[object, object]:
    """Item 0 leads (held in its commit); the others queue behind it; then the gate opens."""
    results: dict[object, object] = {}

    def call(item: object) -> None:
        try:
            results[item] = committer.submit(item)
        except Exception as exc:  # noqa: BLE001 - the test inspects what each caller got
            results[item] = exc

    leader = threading.Thread(target=call, args=(items[0],))
    leader.start()
    gate: GatedCommit = committer._commit  # type: ignore[assignment]
    assert gate.entered.wait(WAIT_S)
    others = [threading.Thread(target=call, args=(item,)) for item in items[1:]]
    for thread in others:
        thread.start()
    assert queued.wait(WAIT_S), "the other callers never queued"
    gate.release()
    for thread in [leader, *others]:
        thread.join(JOIN_TIMEOUT_S)
        assert not thread.is_alive()
    return results


def gated_committer(expected_queue: int, **kwargs: object) -> tuple[GroupCommitter, threading.Event]:
    queued = threading.Event()

    def on_queued(length: int) -> None:
        if length >= expected_queue:
            queued.set()

    return GroupCommitter(GatedCommit(**kwargs), max_batch=100, on_queued=on_queued), queued


def test_callers_queued_behind_a_commit_share_the_next_one():
    committer, queued = gated_committer(expected_queue=9)
    results = submit_all(committer, list(range(10)), queued)
    assert results == {i: f"ok:{i}" for i in range(10)}
    gate: GatedCommit = committer._commit  # type: ignore[assignment]
    assert gate.batches[0] == [0]
    assert sorted(gate.batches[1]) == list(range(1, 10))  # one commit for the nine that waited
    assert (committer.batches, committer.items) == (2, 10)


def test_a_batch_is_bounded_by_max_batch():
    queued = threading.Event()
    committer = GroupCommitter(GatedCommit(), max_batch=4,
                               on_queued=lambda length: queued.set() if length >= 9 else None)
    results = submit_all(committer, list(range(10)), queued)
    assert len(results) == 10
    gate: GatedCommit = committer._commit  # type: ignore[assignment]
    assert [len(b) for b in gate.batches] == [1, 4, 4, 1]


def test_one_bad_item_fails_only_its_own_caller():
    committer, queued = gated_committer(expected_queue=5, fail_on=3)
    results = submit_all(committer, list(range(6)), queued)
    assert isinstance(results[3], ValueError)
    assert {k: v for k, v in results.items() if k != 3} == {i: f"ok:{i}" for i in (0, 1, 2, 4, 5)}


def test_a_lone_caller_commits_at_once_on_its_own_thread():
    seen: list[str] = []

    def commit(items: Sequence[int]) -> list[int]:
        seen.append(threading.current_thread().name)
        return [i * 2 for i in items]

    committer = GroupCommitter(commit, max_batch=10)
    assert committer.submit(21) == 42
    assert seen == [threading.current_thread().name]


def test_max_batch_must_be_positive():
    with pytest.raises(ValueError, match="max_batch"):
        GroupCommitter(lambda items: list(items), max_batch=0)


# --- the store ---------------------------------------------------------------------------


def test_concurrent_appends_are_all_durable_with_their_own_ids(tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    store = Store(url)
    sessions = [store.create_session(name=f"s{i}").id for i in range(40)]
    acked: dict[int, tuple[str, str]] = {}
    lock = threading.Lock()

    def writer(sid: str):
        def run() -> None:
            for k in range(25):
                text = f"{sid}:{k}"
                row_id = store.append_message(sid, "user", text)
                with lock:
                    acked[row_id] = (sid, text)
        return run

    assert run_together([writer(sid) for sid in sessions]) == []
    assert len(acked) == 40 * 25  # every id distinct
    store.close()
    reopened = Store(url)  # another connection: only committed rows are visible
    try:
        M = reopened.m.SessionMessage
        stored = {m.id: (m.session_id, m.content) for m in M.select()}
        assert stored == acked
        for sid in sessions[:3]:  # per session, in the order it appended them
            assert [c for _, c in reopened.recent_messages(sid, 100)] == [f"{sid}:{k}" for k in range(25)]
    finally:
        reopened.close()


def test_append_messages_returns_ids_in_order_and_is_all_or_nothing(store):
    sid = store.create_session(name="s").id
    ids = store.append_messages([(sid, "user", "one"), (sid, "assistant", "two"), (sid, "user", "three")])
    assert ids == sorted(ids) and len(set(ids)) == 3
    M = store.m.SessionMessage
    assert [M.get_by_id(i).content for i in ids] == ["one", "two", "three"]
    before = store.count_messages(sid)
    with pytest.raises(StoreError):
        store.append_messages([(sid, "user", "kept?"), ("no-such-session", "user", "bad")])
    assert store.count_messages(sid) == before


def test_a_batch_larger_than_one_statement_is_still_one_transaction(store):
    sid = store.create_session(name="s").id
    rows = [(sid, "user", f"m{i}") for i in range(MAX_ROWS_PER_STATEMENT + 5)]
    ids = store.append_messages(rows)
    assert len(set(ids)) == len(rows)
    assert store.recent_messages(sid, 2) == [("user", f"m{len(rows) - 2}"), ("user", f"m{len(rows) - 1}")]
    with pytest.raises(StoreError):
        store.append_messages(rows + [("no-such-session", "user", "bad")])
    assert store.count_messages(sid) == len(rows)


def test_appends_to_a_missing_session_fail_alone_among_concurrent_good_ones(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'corvid.db'}")
    try:
        good = [store.create_session(name=f"s{i}").id for i in range(20)]
        outcomes: dict[str, list[object]] = {}

        def writer(sid: str):
            def run() -> None:
                for k in range(10):
                    try:
                        outcomes.setdefault(sid, []).append(store.append_message(sid, "user", f"{k}"))
                    except StoreError as exc:
                        outcomes.setdefault(sid, []).append(exc)
            return run

        assert run_together([writer(sid) for sid in good] + [writer("missing-a"), writer("missing-b")]) == []
        for sid in good:
            assert all(isinstance(v, int) for v in outcomes[sid])
            assert store.count_messages(sid) == 10
        for sid in ("missing-a", "missing-b"):
            assert all(isinstance(v, StoreError) for v in outcomes[sid])
    finally:
        store.close()


def test_append_inside_a_transaction_joins_it_and_rolls_back_with_it(store):
    sid = store.create_session(name="s").id
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.append_message(sid, "user", "inside")
            store.append_messages([(sid, "user", "a"), (sid, "user", "b")])
            assert store.count_messages(sid) == 3
            raise RuntimeError("abort the transaction")
    assert store.count_messages(sid) == 0
    with store.transaction():
        store.append_message(sid, "user", "kept")
    assert store.recent_messages(sid, 5) == [("user", "kept")]


def test_history_blocks_are_stripped_on_the_batched_path_too(store):
    sid = store.create_session(name="s").id
    store.append_messages([(sid, "user", "<conversation_history>old</conversation_history>new")])
    [(role, content)] = store.recent_messages(sid, 5)
    assert "old" not in content and "new" in content


def test_without_group_commit_each_append_commits_alone(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'corvid.db'}", message_writes="direct")
    try:
        sid = store.create_session(name="s").id
        ids = [store.append_message(sid, "user", f"{k}") for k in range(5)]
        assert ids == sorted(ids) and store.count_messages(sid) == 5
        assert store._message_commits.batches == 0
    finally:
        store.close()
