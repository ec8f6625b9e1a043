"""The admin socket: a Unix socket that only its owner can open, serving the admin
protocol (:mod:`corvid_actors.admin_protocol`) with one thread per connection.

Every line is checked before it reaches the AdminActor: garbage, over-long lines,
unknown commands and wrong types get an error reply and the connection stays usable;
no client can take the daemon down. The server owns no runtime state: it calls
``handle(request)`` (the daemon forwards it to the AdminActor) and
``follow(session_id, sink)`` on its connection threads.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from corvid_actors.admin_protocol import (
    BAD_REQUEST,
    BUSY,
    INTERNAL,
    SHUTTING_DOWN,
    TOO_LARGE,
    UNAUTHORIZED,
    UNAVAILABLE,
    AdminError,
    Request,
    RequestRejected,
    encode,
    error_reply,
    ok_reply,
    parse_request,
)
from corvid_actors.errors import CorvidError

#: Unix socket paths longer than this do not fit ``sockaddr_un.sun_path`` on Linux
MAX_SOCKET_PATH_BYTES = 107

Handle = Callable[[Request], Any]
#: follow(session_id or None, sink) -> unfollow; ``sink(session_id, at_iso, event_dict)``
FollowFn = Callable[[str | None, Callable[[str, str, dict[str, Any]], None]], Callable[[], None]]

_HANGUP = object()


class FollowQueue:
    """One follower's events: bounded, and ``put`` never waits (it runs on the EventBus
    thread) — what does not fit is counted and reported with the next item instead."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: deque[Any] = deque()
        self._cond = threading.Condition()
        self._dropped = 0

    def put(self, item: Any) -> None:
        with self._cond:
            if len(self._items) >= self.capacity:
                self._dropped += 1
                return
            self._items.append(item)
            self._cond.notify()

    def hang_up(self) -> None:
        """End the stream after what is queued (always fits)."""
        with self._cond:
            self._items.append(_HANGUP)
            self._cond.notify()

    def get(self) -> tuple[Any, int]:
        """The next item (waiting for one), and how many were dropped before it."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._items))
            dropped, self._dropped = self._dropped, 0
            return self._items.popleft(), dropped
#: bytes read at a time while skipping the rest of an over-long line
_DISCARD_CHUNK = 65536


@dataclass(frozen=True)
class SocketSettings:
    """Limits of the admin socket (from ``[daemon]`` in the config)."""

    token: str = ""
    max_request_bytes: int = 65536
    max_connections: int = 32
    follow_queue_events: int = 10000


class AdminSocketServer:
    """A JSON-lines server on a Unix socket with mode 0600, one thread per connection.

    ``bind()`` creates the socket (refusing paths that do not fit), ``start()`` accepts,
    ``close(reason)`` stops accepting, ends every follower with ``{"end": reason}`` and
    closes every connection. Peers whose uid is neither ours nor root's are refused
    (``SO_PEERCRED``), on top of the file mode.
    """

    def __init__(self, path: Path, handle: Handle, follow: FollowFn, settings: SocketSettings) -> None:
        self.path = Path(path)
        self.handle = handle
        self.follow = follow
        self.settings = settings
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._followers: set[FollowQueue] = set()
        self._closed = False
        self._accept_thread: threading.Thread | None = None
        self._end_reason = "daemon stopped"

    def bind(self) -> None:
        """Create the socket file, owner read/write only. A stale file is replaced."""
        if len(os.fsencode(self.path)) > MAX_SOCKET_PATH_BYTES:
            raise AdminError(UNAVAILABLE, f"admin socket path is too long for a Unix socket "
                                          f"({len(os.fsencode(self.path))} > {MAX_SOCKET_PATH_BYTES} bytes): "
                                          f"{self.path}; use a shorter data directory (CORVID_DATA_DIR)")
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a stale socket of a dead daemon (the caller holds the pid lock)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # born 0600: no window in which others could connect
        try:
            sock.bind(os.fspath(self.path))
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        sock.listen(self.settings.max_connections)
        self._sock = sock

    def start(self) -> None:
        if self._sock is None:
            self.bind()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="admin-accept", daemon=True)
        self._accept_thread.start()

    def close(self, reason: str = "daemon stopped") -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._end_reason = reason
            connections = list(self._connections)
            followers = list(self._followers)
        for queue in followers:
            queue.hang_up()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes accept()
            self._sock.close()
        if self._accept_thread is not None and self._accept_thread is not threading.current_thread():
            self._accept_thread.join()
        for conn in connections:
            # SHUT_RD wakes threads blocked reading; a reply or a follower's "end" line
            # can still be written.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RD)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    # --- connections ------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._closed:
                    return
                continue
            with self._lock:
                refused = self._closed or len(self._connections) >= self.settings.max_connections
                if not refused:
                    self._connections.add(conn)
            if refused:
                self._refuse(conn, BUSY if not self._closed else SHUTTING_DOWN,
                             "too many admin connections" if not self._closed else "the daemon is stopping")
                continue
            threading.Thread(target=self._serve, args=(conn,), name="admin-conn", daemon=True).start()

    @staticmethod
    def _refuse(conn: socket.socket, code: str, message: str) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(encode(error_reply(None, code, message)))
        conn.close()

    def _peer_allowed(self, conn: socket.socket) -> bool:
        if not hasattr(socket, "SO_PEERCRED"):  # pragma: no cover - not Linux: the file mode decides
            return True
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return uid in (os.getuid(), 0)

    def _serve(self, conn: socket.socket) -> None:
        reader = None
        try:
            if not self._peer_allowed(conn):
                conn.sendall(encode(error_reply(None, UNAUTHORIZED, "this daemon belongs to another user")))
                return
            reader = conn.makefile("rb")
            limit = self.settings.max_request_bytes
            while True:
                line = reader.readline(limit + 1)
                if not line:
                    return
                if len(line) > limit and not line.endswith(b"\n"):
                    conn.sendall(encode(error_reply(None, TOO_LARGE, f"request longer than {limit} bytes")))
                    if not self._discard_line(reader):
                        return
                    continue
                if not line.strip():
                    continue
                if self._answer(conn, reader, line):
                    return
        except OSError:
            pass  # the client went away mid-reply: nothing to tell anyone
        except Exception:  # noqa: BLE001 - one bad connection must never take the daemon down
            logger.exception("admin connection failed")
        finally:
            with self._lock:
                self._connections.discard(conn)
            with contextlib.suppress(OSError):
                if reader is not None:
                    reader.close()  # the file holds the descriptor open too
                conn.close()

    @staticmethod
    def _discard_line(reader: Any) -> bool:
        """Skip the rest of an over-long line; False when the client hung up first."""
        while True:
            chunk = reader.readline(_DISCARD_CHUNK)
            if not chunk:
                return False
            if chunk.endswith(b"\n"):
                return True

    def _answer(self, conn: socket.socket, reader: Any, line: bytes) -> bool:
        """Answer one line; True when the connection is done (a follow ended)."""
        try:
            request = parse_request(line, token=self.settings.token)
        except RequestRejected as exc:
            conn.sendall(encode(error_reply(exc.request_id, exc.code, exc.message)))
            return False
        if request.cmd == "follow":
            self._follow(conn, reader, request)
            return True
        try:
            result = self.handle(request)
        except AdminError as exc:
            reply = error_reply(request.id, exc.code, exc.message)
        except CorvidError as exc:
            reply = error_reply(request.id, BAD_REQUEST, str(exc))
        except Exception as exc:  # noqa: BLE001 - reported to the operator, logged with its traceback
            logger.opt(exception=True).error("admin command {} failed", request.cmd)
            reply = error_reply(request.id, INTERNAL, f"{type(exc).__name__}: {exc}")
        else:
            reply = ok_reply(request.id, result)
        conn.sendall(encode(reply))
        return False

    # --- follow -------------------------------------------------------------------------------

    def _follow(self, conn: socket.socket, reader: Any, request: Request) -> None:
        queue = FollowQueue(self.settings.follow_queue_events)

        def sink(session_id: str, at: str, event: dict[str, Any]) -> None:
            queue.put((session_id, at, event))  # on the EventBus thread: never blocks

        try:
            unfollow = self.follow(request.args.get("session"), sink)
        except AdminError as exc:
            conn.sendall(encode(error_reply(request.id, exc.code, exc.message)))
            return
        with self._lock:
            self._followers.add(queue)
            closed = self._closed
        if closed:
            queue.hang_up()
        threading.Thread(target=self._watch_hangup, args=(reader, queue), name="admin-follow-eof",
                         daemon=True).start()
        try:
            conn.sendall(encode(ok_reply(request.id, {"following": request.args.get("session")})))
            self._pump(conn, queue)
        finally:
            unfollow()
            with self._lock:
                self._followers.discard(queue)

    @staticmethod
    def _watch_hangup(reader: Any, queue: FollowQueue) -> None:
        with contextlib.suppress(OSError, ValueError):
            while reader.readline(_DISCARD_CHUNK):
                pass  # a follower has nothing more to say; anything it sends is ignored
        queue.hang_up()

    def _pump(self, conn: socket.socket, queue: FollowQueue) -> None:
        while True:
            item, lost = queue.get()
            if lost:
                conn.sendall(encode({"dropped": lost}))
            if item is _HANGUP:
                if self._closed:
                    with contextlib.suppress(OSError):
                        conn.sendall(encode({"end": self._end_reason}))
                return
            session_id, at, event = item
            conn.sendall(encode({"session_id": session_id, "at": at, "event": event}))
