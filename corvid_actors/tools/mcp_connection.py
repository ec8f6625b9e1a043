"""One external MCP server: its process over stdio and its client session (official ``mcp``).

A :class:`McpConnection` is used from plain threads (the supervisor while a session is
built, a session's worker for a tool call, a closer thread when it ends) and runs as one
task on a single process-wide asyncio loop thread (:mod:`.mcp_loop`), because the ``mcp`` client is async
and its context managers must be entered and left by the same task. Callers wait on
``concurrent.futures`` results *without* a timeout: every deadline (connect, call) is
enforced inside the loop, so each wait is bounded there.

The loop keeps real time even under a simulation's frozen clock (freezegun patches
``time.monotonic``, which asyncio reads): a server is a real process, so its deadlines
are real, like a coding tool's subprocess deadline (``corvid_actors.clock.io_clock``).

Ending a connection, on every path (closed, failed to start, lost mid-call), leaves the
``mcp`` package's stdio shutdown to run (close stdin, grace period, SIGTERM then SIGKILL
to the process group) and then kills whatever is left of the server's *session* —
descendants that outlived their parent or left its process group
(``corvid_actors.tools.proc_tree``, Linux only; elsewhere the ``mcp`` group kill is all
there is). A server that failed or died gets no grace period: its tree is killed at once.

``mcp`` is imported only when a connection starts, so the runtime works without it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from corvid_actors.core.vocabulary import CancelToken, ToolResult
from corvid_actors.tools.mcp_loop import McpLoop
from corvid_actors.tools.proc_tree import find_child_with_marker, kill_marked, kill_session_tree

#: the variable that marks a server process as ours, so its pid is found
MARKER_VARIABLE = "CORVID_MCP_SERVER_ID"

#: how long closing a connection waits for its killed processes to be gone
_KILL_WAIT_S = 5.0
#: the most bytes one character takes in UTF-8 (to read enough of a stderr tail)
_MAX_UTF8_BYTES = 4


@dataclass(frozen=True)
class McpServerSpec:
    """How to start one MCP server (from the config file or the store)."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    enabled: bool = True
    #: start it in the OS sandbox (when ``[mcp] sandbox`` is on), with the network or not
    sandbox: bool = True
    network: bool = True


@dataclass(frozen=True)
class McpLimits:
    """The real-time bounds of one connection (see ``[mcp]`` in config/default.toml)."""

    connect_timeout_s: float = 30.0
    call_timeout_s: float = 120.0
    stderr_tail_chars: int = 2000


# --- one connection ---------------------------------------------------------------------------


@dataclass(frozen=True)
class McpToolInfo:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]


class McpConnection:
    """A running MCP server and its client session. Thread-safe; see the module docstring.

    ``start()`` then ``wait_ready()`` (True: ``tools`` is set; False: ``error`` says why);
    ``call()`` from a worker; ``close()`` (blocking, idempotent) ends it and its process
    tree. ``on_lost(message)`` is called once if the server dies while in use.
    """

    def __init__(self, spec: McpServerSpec, *, env: dict[str, str], cwd: str | None,
                 limits: McpLimits = McpLimits(), on_lost: Callable[[str], None] | None = None,
                 render: Callable[[Any], ToolResult] | None = None,
                 argv: list[str] | None = None, on_end: Callable[[], None] | None = None) -> None:
        self.spec = spec
        #: the command line started (the sandbox launcher's, or the spec's own)
        self.argv = list(argv) if argv else [spec.command, *spec.args]
        self._on_end = on_end
        self.limits = limits
        self.tools: tuple[McpToolInfo, ...] = ()
        self.error = ""
        self._env = env
        self._cwd = cwd
        self._on_lost = on_lost
        self._render = render or _plain_render
        self._marker = f"{spec.name}-{uuid.uuid4().hex}"
        self._hub: McpLoop | None = None
        self._ready: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._lock = threading.Lock()
        self._started = False
        self._close_requested = False
        self._lost = ""
        self._closing: asyncio.Event | None = None
        self._session: Any = None
        self._leader: int | None = None
        self._stderr: Any = None
        self._handshake_scope: Any = None
        self._calling: str | None = None

    @property
    def alive(self) -> bool:
        return self._session is not None and not self._lost and not self._close_requested

    # --- any thread -------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        self._hub = McpLoop.get()
        self._hub.live.add(self)
        self._hub.submit(self._run())

    def wait_ready(self) -> bool:
        """Block until the server answered ``initialize`` and ``tools/list``, or failed."""
        return self._ready.result() if self._started else False

    def call(self, tool: str, arguments: dict[str, Any], cancel: CancelToken | None = None,
             timeout_s: float | None = None) -> ToolResult:
        """Call ``tool`` (its name on the server); blocks the calling worker, bounded in the loop
        by ``timeout_s`` (default: ``limits.call_timeout_s``)."""
        if not self.alive or self._hub is None:
            return ToolResult(self._unavailable(), is_error=True)
        future = self._hub.submit(self._call(tool, arguments, timeout_s or self.limits.call_timeout_s))

        def cancel_call() -> None:
            future.cancel()  # False when it has just finished: its result stands

        unregister = cancel.on_cancel(cancel_call) if cancel is not None else (lambda: None)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            return ToolResult(f"MCP tool {tool} was cancelled", is_error=True)
        finally:
            unregister()

    def close(self) -> None:
        """End the connection and kill the server's process tree; returns when it is gone."""
        with self._lock:
            self._close_requested = True
            started = self._started
        if not started or self._hub is None:
            return
        self._hub.call_soon(self._wake_closing)
        self._done.result()

    # --- the loop thread --------------------------------------------------------------------

    def _wake_closing(self) -> None:
        if self._closing is not None:
            self._closing.set()

    async def _run(self) -> None:
        self._closing = asyncio.Event()
        if self._close_requested:
            self._closing.set()
        # Append mode: the server writes while we may read its tail for a message.
        self._stderr = tempfile.TemporaryFile("a+b")
        watcher: Callable[[], None] = lambda: None  # noqa: E731
        try:
            from mcp import ClientSession, StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=self.argv[0], args=self.argv[1:],
                env={**self._env, MARKER_VARIABLE: self._marker}, cwd=self._cwd or None,
            )
            async with stdio_client(params, errlog=self._stderr) as (read, write):
                self._leader = find_child_with_marker(MARKER_VARIABLE, self._marker)
                watcher = self._watch_leader()
                async with ClientSession(read, write) as session:
                    if await self._handshake(session):
                        await self._closing.wait()
                    if not self._close_requested:
                        # Failed or lost: no grace period for a broken server.
                        self._closing.set()
                        kill_session_tree(self._leader)
        except Exception as exc:  # noqa: BLE001 - spawn and transport failures are reported, not raised
            if not self._ready.done():
                self._fail(f"could not start: {_describe(exc)}")
            else:
                logger.opt(exception=True).warning("MCP server {} ended with an error", self.spec.name)
        finally:
            self._session = None
            watcher()
            # waits (bounded) until the members are gone: off the loop thread
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(
                    None, kill_session_tree, self._leader, _KILL_WAIT_S)
            # what left the session (setsid) or lives in a sandbox's PID namespace still
            # carries the marker: gone before close() returns
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(
                    None, kill_marked, MARKER_VARIABLE, self._marker, _KILL_WAIT_S)
            self._stderr.close()
            if self._on_end is not None:
                with contextlib.suppress(Exception):
                    self._on_end()
            if not self._ready.done():
                self._ready.set_result(False)
            if self._hub is not None:
                self._hub.live.discard(self)
            self._done.set_result(None)

    async def _handshake(self, session: Any) -> bool:
        import anyio

        listed: list[Any] | None = None
        try:
            # The outer scope lets the leader watcher abandon the handshake of a server that died.
            with anyio.CancelScope() as self._handshake_scope, anyio.fail_after(self.limits.connect_timeout_s):
                await session.initialize()
                listed = await _list_tools(session)
        except TimeoutError:
            self._fail(f"did not answer initialize/tools/list within {self.limits.connect_timeout_s:g}s")
            return False
        except Exception as exc:  # noqa: BLE001 - a broken server is reported, not raised
            self._fail(f"failed during initialize: {_describe(exc)}")
            return False
        if listed is None or self._ready.done():  # abandoned: the server exited (already reported)
            return False
        self.tools = tuple(
            McpToolInfo(t.name, t.description or t.title or "", dict(t.input_schema or {})) for t in listed
        )
        self._session = session
        self._ready.set_result(True)
        return True

    async def _call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        import anyio
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        session = self._session
        if session is None or self._lost:
            return ToolResult(self._unavailable(), is_error=True)
        self._calling = tool
        try:
            with anyio.fail_after(timeout_s):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            return ToolResult(f"MCP tool {tool} (server '{self.spec.name}') did not answer within "
                              f"{timeout_s:g}s", is_error=True)
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED or self._lost:
                self._mark_lost(f"exited during a call to {tool}")
                return ToolResult(self._unavailable(), is_error=True)
            return ToolResult(f"MCP server '{self.spec.name}' refused {tool}: {exc}", is_error=True)
        except Exception as exc:  # noqa: BLE001 - e.g. a result that fails validation
            return ToolResult(f"MCP tool {tool} failed: {_describe(exc)}", is_error=True)
        finally:
            self._calling = None
        return self._render(result)

    def _watch_leader(self) -> Callable[[], None]:
        """Notice the server's death at once, even while a child it left holds its stdout open
        (then no end-of-file ever comes and a pending call would wait for its timeout)."""
        if self._leader is None or not hasattr(os, "pidfd_open"):
            return lambda: None
        try:
            fd = os.pidfd_open(self._leader)
        except OSError:  # already gone: the reader sees end-of-file
            return lambda: None
        loop = asyncio.get_running_loop()

        def exited() -> None:
            loop.remove_reader(fd)
            self._mark_lost(f"exited during a call to {self._calling}" if self._calling else "exited")

        loop.add_reader(fd, exited)

        def stop() -> None:
            loop.remove_reader(fd)
            os.close(fd)

        return stop

    def _mark_lost(self, how: str) -> None:
        if self._lost or self._close_requested or self._closing is None or self._closing.is_set():
            return
        if not self._ready.done():  # died during the handshake: a start failure, not a loss
            self._fail(f"{how} before it answered initialize")
            self._closing.set()
            if self._handshake_scope is not None:
                self._handshake_scope.cancel()
            return
        self._lost = f"MCP server '{self.spec.name}' {how}"
        self._closing.set()  # tear down now: the rest of its tree is killed on the way out
        message = self._with_stderr(f"{self._lost}; its tools are unavailable for the rest of this session")
        logger.warning(message)
        if self._on_lost is not None:
            self._on_lost(message)

    def _fail(self, why: str) -> None:
        if self._ready.done():
            return
        self.error = self._with_stderr(f"MCP server '{self.spec.name}' {why}")
        self._ready.set_result(False)

    def _unavailable(self) -> str:
        if self._lost:
            return f"{self._lost}; its tools are unavailable for the rest of this session"
        return f"MCP server '{self.spec.name}' is not running"

    def _with_stderr(self, message: str) -> str:
        tail = _tail(self._stderr, self.limits.stderr_tail_chars)
        return f"{message}. Server stderr: {tail}" if tail else message


async def _list_tools(session: Any) -> list[Any]:
    """Every page of ``tools/list`` (the connect deadline bounds a server that never ends)."""
    from mcp.types import PaginatedRequestParams

    tools: list[Any] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}"


def _tail(handle: Any, limit: int) -> str:
    """The last ``limit`` characters a server wrote to stderr, as one line."""
    if handle is None or handle.closed:
        return ""
    with contextlib.suppress(OSError, ValueError):
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - limit * _MAX_UTF8_BYTES))
        text = handle.read().decode("utf-8", "replace")
        return " ".join(text[-limit:].split())  # one line for logs and events
    return ""


def _plain_render(result: Any) -> ToolResult:
    text = "\n".join(getattr(block, "text", f"[{getattr(block, 'type', '?')}]") for block in result.content)
    return ToolResult(text, is_error=bool(result.is_error))
