"""The one asyncio loop thread every MCP connection of the process runs on.

:class:`~corvid_actors.tools.mcp_connection.McpConnection` runs each connection as one task
here (the ``mcp`` client is async, and its context managers must be entered and left by
the same task). The loop keeps real time even under a simulation's frozen clock:
freezegun patches ``time.monotonic``, which asyncio reads, but a server is a real process
and its deadlines are real. At interpreter exit every connection still open is closed, so
no server outlives the process that started it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from corvid_actors.core.io_loop import RealTimeEventLoop


class Closable(Protocol):
    """What the loop closes at exit (an ``McpConnection``)."""

    def close(self) -> None:
        ...


class McpLoop:
    """The process-wide loop thread (:meth:`get` starts it on first use)."""

    _instance: McpLoop | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.loop = RealTimeEventLoop()
        #: the connections started on it and not yet collected (closed at exit)
        self.live: weakref.WeakSet[Closable] = weakref.WeakSet()
        self.thread = threading.Thread(target=self._run, name="corvid-mcp", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> McpLoop:
        with cls._guard:
            if cls._instance is None:
                cls._instance = cls()
                atexit.register(cls._instance.close_all)
            return cls._instance

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        """Run ``coro`` on the loop; any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` on the loop thread; any thread."""
        self.loop.call_soon_threadsafe(fn)

    def close_all(self) -> None:
        """At interpreter exit: no server outlives the process that started it."""
        for connection in list(self.live):
            connection.close()
