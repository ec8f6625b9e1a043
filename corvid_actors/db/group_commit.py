"""Group commit: many threads' writes share one transaction, each acknowledged after it commits.

A commit costs far more than the row it carries (the transaction, the WAL frame, the
lock hand-over between threads), so when many session actors persist messages at once
the store commits them together. There is no writer thread: the first caller to find
nobody committing becomes the *leader*, takes every request queued so far (up to
``max_batch``), commits them as one batch and wakes their callers; if more requests
arrived meanwhile, it hands the leadership to the oldest of them. A caller returns only
once the batch holding its request has committed (or failed), so a returned call is
still the acknowledgement that the write is durable.

A lone caller leads a batch of one at once: nothing ever waits for company, and no
timer or clock is involved.

    committer = GroupCommitter(commit_rows, max_batch=500)
    row_id = committer.submit(("session-1", "user", "hello"))
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

#: ``commit(items)`` → one result per item (in order), or raise to fail the whole batch
BatchCommit = Callable[[Sequence[Item]], Sequence[Result]]


class _Request(Generic[Item, Result]):
    __slots__ = ("item", "result", "error", "done", "lead", "wake")

    def __init__(self, item: Item) -> None:
        self.item = item
        self.result: Result | None = None
        self.error: BaseException | None = None
        self.done = False
        self.lead = False
        # A lock held from birth: the caller blocks acquiring it, the leader releases it
        # (the cheapest hand-off between two threads; an Event allocates a lock per wait).
        self.wake = threading.Lock()
        self.wake.acquire()


class GroupCommitter(Generic[Item, Result]):
    """Batches concurrent :meth:`submit` calls into shared commits (see the module docstring).

    ``max_batch`` bounds the items of one commit; ``extra_batches`` is how many batches a
    leader commits for others after its own before handing over. ``commit`` runs on the
    leading caller's thread. When a batch of several fails, each of its items is committed
    again on its own, so one bad item (a foreign key that does not exist) fails only its
    own caller.
    """

    def __init__(self, commit: BatchCommit[Item, Result], *, max_batch: int, extra_batches: int = 0,
                 on_queued: Callable[[int], None] | None = None) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1 (got {max_batch})")
        self._commit = commit
        self._max_batch = max_batch
        self._extra_batches = extra_batches
        #: told the queue length after each submit queued its item (observability, tests)
        self._on_queued = on_queued
        self._lock = threading.Lock()
        self._queue: deque[_Request[Item, Result]] = deque()
        self._leading = False
        #: batches committed and items carried (for benchmarks and tests)
        self.batches = 0
        self.items = 0

    def submit(self, item: Item) -> Result:
        """Commit ``item`` (with whatever else is queued); return its result once committed.

        Raises what committing ``item`` raised. Blocks the calling thread: never call it
        from inside a commit of the same committer.
        """
        request: _Request[Item, Result] = _Request(item)
        with self._lock:
            self._queue.append(request)
            if not self._leading:
                self._leading = True
                request.lead = True
            queued = len(self._queue)
        if self._on_queued is not None:
            self._on_queued(queued)
        if not request.lead:
            request.wake.acquire()  # released when our batch committed, or when we are made leader
        if not request.done:
            self._lead(request)
        if request.error is not None:
            raise request.error
        return request.result  # type: ignore[return-value]

    def _lead(self, own: _Request[Item, Result]) -> None:
        """Commit batches until ``own`` is done and ``extra_batches`` more are, then hand over.

        Going on leading (rather than waking a successor at once) keeps the commits on a
        thread that is already running: a woken successor first has to be scheduled and
        to win the GIL against every caller just woken.
        """
        extra = 0
        while True:
            with self._lock:
                batch = [self._queue.popleft() for _ in range(min(self._max_batch, len(self._queue)))]
            successor: _Request[Item, Result] | None = None
            go_on = False
            try:
                self._commit_batch(batch)
            finally:
                if own.done or any(r is own for r in batch):
                    extra += 1
                with self._lock:
                    if self._queue and extra <= self._extra_batches:
                        go_on = True
                    elif self._queue:
                        successor = self._queue[0]
                        successor.lead = True
                    else:
                        self._leading = False
                for request in batch:
                    request.done = True
                    if request is not own:
                        request.wake.release()
                if successor is not None:
                    successor.wake.release()
            if not go_on:
                return

    def _commit_batch(self, batch: list[_Request[Item, Result]]) -> None:
        try:
            results = self._commit([r.item for r in batch])
        except BaseException as exc:
            if len(batch) == 1 or not isinstance(exc, Exception):
                for request in batch:
                    request.error = exc
                return
            # One bad item must not fail the others: commit each on its own.
            for request in batch:
                try:
                    request.result = self._commit([request.item])[0]
                except Exception as own:  # noqa: BLE001 - handed to that item's caller
                    request.error = own
            self._count(len(batch), len(batch))
            return
        if len(results) != len(batch):
            error = RuntimeError(f"group commit returned {len(results)} results for {len(batch)} items")
            for request in batch:
                request.error = error
            return
        for request, result in zip(batch, results, strict=True):
            request.result = result
        self._count(1, len(batch))

    def _count(self, batches: int, items: int) -> None:
        with self._lock:
            self.batches += batches
            self.items += items
