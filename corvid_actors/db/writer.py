"""The store's writer thread: one thread owns message inserts and commits them in batches.

A commit costs far more than the row it carries, and a thread woken per message costs more
than the SQL (issue 18: lock round trips and wake-ups were the limit of the group commit).
So one daemon thread per store takes every request queued so far (up to ``max_batch``),
commits them in one transaction (the store's multi-row ``INSERT``), and only then completes
each request's :class:`WriteAck`: acknowledged means committed.

Callers choose how to wait. :meth:`MessageWriter.submit` blocks until its own request has
committed (``send_message`` must persist before it returns) — and when nothing is queued or
being committed, the caller commits its request itself, as a lone group-commit leader would
(handing one write to the writer thread and back costs more than the commit);
:meth:`MessageWriter.submit_async`
returns the acknowledgement at once, and ``ack.add_done_callback`` delivers it as a message
to an actor — no caller thread is woken per message.

Queuing takes no lock: a deque's append is atomic, and a caller takes the writer's lock only
to wake it when it sleeps. With 200 sessions appending at once, the lock taken per message
was the limit (1.5 context switches a message, ~40 % of the CPU in the kernel): without it
the async appends went from ~30,000 to ~85,000 acknowledged messages/s here.

When a batch of several fails, each of its requests is committed again on its own, so one
bad request (a session that does not exist) fails only its own future. Requests of one
thread commit in the order they were submitted (one queue, one writer).

    writer = MessageWriter(commit_rows, max_batch=500, name="store-writer")
    row_ids = writer.submit(rows)                 # blocks: returns once committed
    future = writer.submit_async(rows)            # returns at once
    writer.close()                                # commits what is queued, then the thread ends
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, cast

from loguru import logger

from corvid_actors.errors import StoreError

Item = TypeVar("Item")
Result = TypeVar("Result")

#: ``commit(items)`` → one result per item (in order), or raise to fail the whole batch
BatchCommit = Callable[[Sequence[Item]], Sequence[Result]]


class WriterClosed(StoreError):
    """A write was submitted after the store's writer was closed."""


class WriteTimeout(StoreError):
    """:meth:`WriteAck.result` waited ``timeout`` seconds and the write had not committed."""


class WriteAck(Generic[Result]):
    """The acknowledgement of one queued write: done once it committed (or failed).

    The part of :class:`concurrent.futures.Future` a writer's callers use — ``done()``,
    ``result()``, ``exception()``, ``add_done_callback()`` — at a fraction of its cost: no
    condition variable is made unless a caller blocks in :meth:`result`, and then only a
    lock. Completed on the writer thread; callbacks run there (keep them cheap: tell an
    actor). Any thread may wait on it.
    """

    __slots__ = ("_done", "_result", "_error", "_callbacks", "_waiter", "_guard")

    def __init__(self, guard: threading.Lock) -> None:
        self._done = False
        self._result: Result | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[WriteAck[Result]], None]] | None = None
        self._waiter: threading.Lock | None = None
        #: the writer's lock: makes "not done yet, so register" atomic with completion
        self._guard = guard

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> Result:
        """The write's result once committed (blocks until then, at most ``timeout`` real
        seconds: :class:`WriteTimeout`); raises what committing it raised."""
        if not self._done:
            with self._guard:
                if self._done:
                    waiter = None
                elif self._waiter is None:
                    waiter = self._waiter = threading.Lock()
                    waiter.acquire()
                else:
                    waiter = self._waiter  # another thread waits for this write too
            if waiter is not None:
                if not waiter.acquire(timeout=-1 if timeout is None else timeout):
                    raise WriteTimeout(f"the write did not commit within {timeout} s")
                waiter.release()  # the next waiter's turn: several threads may wait for one write
        if self._error is not None:
            raise self._error
        return cast(Result, self._result)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """What committing the write raised (None: it committed); waits like :meth:`result`."""
        try:
            self.result(timeout)
        except WriteTimeout:
            raise
        except BaseException as exc:  # noqa: BLE001 - that is the answer
            return exc
        return None

    def add_done_callback(self, fn: Callable[[WriteAck[Result]], None]) -> None:
        """Call ``fn(ack)`` once done: at once (on this thread) if it is, else on the writer
        thread right after the commit."""
        if not self._done:
            with self._guard:
                if not self._done:
                    if self._callbacks is None:
                        self._callbacks = []
                    self._callbacks.append(fn)
                    return
        _call(fn, self)

    def _complete(self, result: Result | None, error: BaseException | None) -> None:
        # writer thread only
        self._result, self._error = result, error
        with self._guard:
            self._done = True
            waiter, callbacks = self._waiter, self._callbacks
        if waiter is not None:
            waiter.release()
        if callbacks:
            for fn in callbacks:
                _call(fn, self)


def _call(fn: Callable[[WriteAck[Result]], None], ack: WriteAck[Result]) -> None:
    try:
        fn(ack)
    except Exception:  # noqa: BLE001 - a caller's callback must not stop the writer
        logger.opt(exception=True).error("a write acknowledgement callback raised")


class MessageWriter(Generic[Item, Result]):
    """One writer thread committing queued items in batches (see the module docstring).

    ``commit`` runs on the writer thread only. The thread starts with the first submit and
    ends with :meth:`close`; it is a daemon thread, so a process that exits without closing
    the store does not hang (what was not yet committed was not acknowledged either).
    """

    def __init__(self, commit: BatchCommit[Item, Result], *, max_batch: int, name: str = "store-writer") -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1 (got {max_batch})")
        self._commit = commit
        self._max_batch = max_batch
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._ack_guard = threading.Lock()
        self._queue: deque[tuple[Item, WriteAck[Result]]] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: the writer waits for work, or has not started: a submit must wake it
        self._sleeping = True
        #: the writer thread found the writer closed and its queue empty, and ended
        self._drained = False
        #: a batch is being committed (by the writer thread, or inline by a lone caller)
        self._committing = False
        #: the caller committing inline right now (see :meth:`submit`)
        self._inline_committer: threading.Thread | None = None
        #: batches committed and items carried (benchmarks, tests)
        self.batches = 0
        self.items = 0

    @property
    def thread(self) -> threading.Thread | None:
        """The writer thread (None before the first submit)."""
        return self._thread

    def submit_async(self, item: Item) -> WriteAck[Result]:
        """Queue ``item``; its acknowledgement completes (on the writer thread) once it
        committed, with its result, or with what committing it raised. Never blocks on the
        database, nor on other callers: the queue takes it without a lock (a deque's append
        is atomic), and the writer's lock is taken only to wake the writer when it sleeps."""
        future: WriteAck[Result] = WriteAck(self._ack_guard)
        if self._closed:
            raise WriterClosed("the store is closed: nothing more can be written")
        entry = (item, future)
        self._queue.append(entry)
        # The writer sets ``_sleeping`` before it looks at the queue a last time and waits:
        # a caller that reads False appended before that look (the writer sees the entry);
        # one that reads True wakes it, under the lock it waits on. (Plain attribute reads
        # and writes are ordered under the GIL, which this relies on.)
        if self._sleeping or self._closed:
            with self._cond:
                if self._closed and (self._thread is None or self._drained):
                    # closed meanwhile and no writer is left: unless the writer took it
                    # before it ended, it was never queued
                    try:
                        self._queue.remove(entry)
                    except ValueError:
                        return future  # committed (or failed) by the writer's last batch
                    raise WriterClosed("the store is closed: nothing more can be written")
                if self._sleeping:
                    self._wake_writer()
        return future

    def _wake_writer(self) -> None:
        # under self._cond
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        else:
            self._cond.notify()

    def submit(self, item: Item) -> Result:
        """Commit ``item`` and return its result once committed (blocks the caller).

        Raises what committing it raised. Never call it on the writer thread (from inside a
        commit): it would wait for itself."""
        me = threading.current_thread()
        if me is self._thread or me is self._inline_committer:
            raise RuntimeError("MessageWriter.submit called from inside a commit (on its own writer thread)")
        with self._cond:
            # Nothing queued and nothing being committed: no write of anyone's is ahead of
            # this one, so the caller commits it itself (a hand-off to the writer thread and
            # back costs more than the commit). Otherwise it queues behind the others.
            inline = not self._queue and not self._committing and not self._closed
            if inline:
                self._committing = True
                self._inline_committer = me
        if not inline:
            return self.submit_async(item).result()
        ack: WriteAck[Result] = WriteAck(self._ack_guard)
        try:
            self._commit_batch([(item, ack)])
        finally:
            with self._cond:
                self._committing = False
                self._inline_committer = None
                if self._queue:
                    self._wake_writer()
        return ack.result()

    def close(self) -> None:
        """Refuse new items, commit what is queued, and end the thread (blocks until then)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # --- the writer thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._committing = False
                while not self._queue or self._committing:
                    if self._closed and not self._queue:
                        self._drained = True
                        return  # closed and drained
                    self._sleeping = True
                    if self._queue and not self._committing:
                        break  # queued before the caller could see _sleeping (submit_async)
                    self._cond.wait()
                self._sleeping = False
                n = min(len(self._queue), self._max_batch)
                batch = [self._queue.popleft() for _ in range(n)]
                self._committing = True
            self._commit_batch(batch)

    def _commit_batch(self, batch: list[tuple[Item, WriteAck[Result]]]) -> None:
        try:
            results = self._commit([item for item, _ in batch])
        except BaseException as exc:  # noqa: BLE001 - every caller must hear of it
            if len(batch) == 1:
                _fail(batch[0][1], exc)
                return
            # One bad item must not fail the others: commit each on its own.
            for one in batch:
                self._commit_batch([one])
            return
        self.batches += 1
        self.items += len(batch)
        for (_, ack), result in zip(batch, results, strict=True):
            ack._complete(result, None)


def _fail(ack: WriteAck[Result], exc: BaseException) -> None:
    if not isinstance(exc, Exception):  # pragma: no cover - KeyboardInterrupt and the like
        logger.opt(exception=exc).error("the store writer was interrupted")
    ack._complete(None, exc)
