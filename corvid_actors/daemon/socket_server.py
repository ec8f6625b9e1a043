"""The admin socket: a Unix socket that only its owner can open, serving the admin
protocol (:mod:`corvid_actors.daemon.protocol`) with one thread per connection.

Every line is checked before it reaches the AdminActor: garbage, over-long lines,
unknown commands and wrong types get an error reply and the connection stays usable;
no client can take the daemon down. Connections are bounded in time and number:

- a connection must send a valid first request (token included, when one is set) within
  ``auth_timeout_s`` of connecting — a total deadline, so a slow drip does not extend it;
- afterwards each request must arrive within ``idle_timeout_s`` of the previous reply;
- either timeout is answered ``{"ok": false, "error": {"code": "timeout", …}}`` and the
  connection closed;
- at the connection cap, a new connection evicts the oldest *idle* connection that never
  sent a valid request (then the oldest idle one); only when every connection is busy
  (mid-request or following) is the newcomer refused ``busy``;
- a request line is at most ``max_request_bytes``, except ``send``, whose line may be up
  to ``max_send_bytes`` (large messages). The server owns no runtime state: it calls
``handle(request)`` (the daemon forwards it to the AdminActor) and
``follow(session_id, sink)`` on its connection threads.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loguru import logger

from corvid_actors.clock import Clock, RealClock
from corvid_actors.daemon.protocol import (
    Request,
    RequestRejected,
    encode,
    error_reply,
    ok_reply,
    parse_request,
)
from corvid_actors.daemon.socket_io import DISCARD_CHUNK, HANGUP, FollowQueue, LineReader
from corvid_actors.errors import (
    BAD_REQUEST,
    BUSY,
    INTERNAL,
    SHUTTING_DOWN,
    TIMEOUT,
    TOO_LARGE,
    UNAUTHORIZED,
    UNAVAILABLE,
    AdminError,
    CorvidError,
    admin_code,
)

#: Unix socket paths longer than this do not fit ``sockaddr_un.sun_path`` on Linux
MAX_SOCKET_PATH_BYTES = 107

Handle = Callable[[Request], Any]
#: follow(session_id or None, sink) -> unfollow; ``sink(session_id, at_iso, event_dict)``
FollowFn = Callable[[str | None, Callable[[str, str, dict[str, Any]], None]], Callable[[], None]]

@dataclass(frozen=True)
class SocketSettings:
    """Limits of the admin socket (from ``[daemon]`` in the config)."""

    token: str = ""
    max_request_bytes: int = 65536
    max_connections: int = 32
    follow_queue_events: int = 10000
    #: a ``send`` request line may be this long (the message rides in it)
    max_send_bytes: int = 8 * 1024 * 1024
    #: a new connection must send a valid request within this many seconds
    auth_timeout_s: float = 10.0
    #: a connection that sends nothing for this long after a reply is closed
    idle_timeout_s: float = 300.0


@dataclass(eq=False)
class _Connection:
    """What the accept loop knows of one connection (guarded by the server's lock)."""

    sock: socket.socket
    accepted_at: float
    #: it has sent a valid request (with the right token)
    authenticated: bool = False
    #: waiting for the client's next line (not mid-request, not following)
    idle: bool = True
    idle_since: float = 0.0
    evicted: bool = False
    #: a reply is being written: an eviction meanwhile is carried out by the writer, after it
    replying: bool = False
    #: who is connected (``admin:<user>``, by the peer's uid): an approval's answerer
    caller: str = "admin"


class AdminSocketServer:
    """A JSON-lines server on a Unix socket with mode 0600, one thread per connection.

    ``bind()`` creates the socket (refusing paths that do not fit), ``start()`` accepts,
    ``close(reason)`` stops accepting, ends every follower with ``{"end": reason}`` and
    closes every connection. Peers whose uid is neither ours nor root's are refused
    (``SO_PEERCRED``), on top of the file mode.
    """

    def __init__(self, path: Path, handle: Handle, follow: FollowFn, settings: SocketSettings,
                 clock: Clock | None = None) -> None:
        self.path = Path(path)
        self.handle = handle
        self.follow = follow
        self.settings = settings
        self.clock = clock or RealClock()  # monotonic() only: its timer thread never starts
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, _Connection] = {}
        self._followers: set[FollowQueue] = set()
        #: events followers lost by falling ``follow_queue_events`` behind (all followers)
        self._dropped_events = 0
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
        """Accept connections on a thread of their own (binding first when :meth:`bind` was not called)."""
        if self._sock is None:
            self.bind()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="admin-accept", daemon=True)
        self._accept_thread.start()

    def close(self, reason: str = "daemon stopped") -> None:
        """Stop accepting, end every follower's stream with ``reason`` and close the socket."""
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
            now = self.clock.monotonic()
            with self._lock:
                refused = self._closed or (len(self._connections) >= self.settings.max_connections
                                           and not self._evict_one_locked())
                if not refused:
                    self._connections[conn] = _Connection(conn, now, idle_since=now)
            if refused:
                self._refuse(conn, BUSY if not self._closed else SHUTTING_DOWN,
                             "too many admin connections, all busy" if not self._closed
                             else "the daemon is stopping")
                continue
            threading.Thread(target=self._serve, args=(conn,), name="admin-conn", daemon=True).start()

    def _evict_one_locked(self) -> bool:
        """Make room at the cap: close the oldest idle connection that never sent a valid
        request, else the one idle longest. False when every connection is busy."""
        idle = [c for c in self._connections.values() if c.idle and not c.evicted]
        strangers = [c for c in idle if not c.authenticated]
        victim = (min(strangers, key=lambda c: c.accepted_at) if strangers
                  else min(idle, key=lambda c: c.idle_since) if idle else None)
        if victim is None:
            return False
        victim.evicted = True
        del self._connections[victim.sock]
        if not victim.replying:  # else its thread notifies it once the reply is out (_reply)
            self._notify_evicted(victim.sock)
        logger.info("admin socket: evicted an idle {} connection to make room",
                    "authenticated" if victim.authenticated else "unauthenticated")
        return True

    @staticmethod
    def _notify_evicted(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            # MSG_DONTWAIT: a peer that never reads must not block the accept loop
            sock.send(encode(error_reply(None, BUSY, "evicted: the admin connection cap was reached "
                                                     "and this connection was idle")),
                      socket.MSG_DONTWAIT)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # its thread wakes up and closes it

    @staticmethod
    def _refuse(conn: socket.socket, code: str, message: str) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(encode(error_reply(None, code, message)))
        conn.close()

    @staticmethod
    def _peer_allowed(conn: socket.socket, state: _Connection) -> bool:
        if not hasattr(socket, "SO_PEERCRED"):  # pragma: no cover - not Linux: the file mode decides
            return True
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        try:
            state.caller = f"admin:{pwd.getpwuid(uid).pw_name}"
        except KeyError:  # a uid without a passwd entry (a container's)
            state.caller = f"admin:uid{uid}"
        return uid in (os.getuid(), 0)

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            state = self._connections.get(conn)
        if state is None:  # pragma: no cover - evicted before its thread ran
            conn.close()
            return
        try:
            if not self._peer_allowed(conn, state):
                self._send(conn, encode(error_reply(None, UNAUTHORIZED, "this daemon belongs to another user")))
                return
            self._serve_lines(conn, state, LineReader(conn, self.clock))
        except TimeoutError:
            authed = state.authenticated
            with contextlib.suppress(OSError):
                # best effort, never waiting: the timeout may have been a write to a peer
                # that stopped reading
                conn.send(encode(error_reply(None, TIMEOUT, (
                    f"idle for {self.settings.idle_timeout_s:g} s: connection closed" if authed else
                    f"no valid first request within {self.settings.auth_timeout_s:g} s of connecting: "
                    "connection closed"))), socket.MSG_DONTWAIT)
        except OSError:
            pass  # the client went away mid-reply: nothing to tell anyone
        except Exception:  # noqa: BLE001 - one bad connection must never take the daemon down
            logger.exception("admin connection failed")
        finally:
            with self._lock:
                if self._connections.get(conn) is state:
                    del self._connections[conn]
            with contextlib.suppress(OSError):
                conn.close()

    def _serve_lines(self, conn: socket.socket, state: _Connection, reader: LineReader) -> None:
        limit = max(self.settings.max_request_bytes, self.settings.max_send_bytes)
        while True:
            deadline = (state.accepted_at + self.settings.auth_timeout_s if not state.authenticated
                        else self.clock.monotonic() + self.settings.idle_timeout_s)
            line = reader.readline(limit, deadline)
            with self._lock:
                if state.evicted or not line:
                    return
                state.idle = False
            # the idle order is the order of requests, taken before the reply goes out: a
            # thread descheduled after replying must not look more recently used than a
            # connection that asked after this one was answered
            asked_at = self.clock.monotonic()
            if len(line) > limit and not line.endswith(b"\n"):
                self._send(conn, encode(error_reply(None, TOO_LARGE, f"request longer than {limit} bytes")))
                if not reader.discard_line(deadline):
                    return
            elif line.strip() and self._answer(conn, reader, line, state, asked_at):
                return
            with self._lock:
                if state.evicted:
                    return
                state.idle = True
                state.idle_since = asked_at

    def _send(self, conn: socket.socket, data: bytes) -> None:
        # a bounded write: a client that stops reading cannot hold this thread for ever
        conn.settimeout(self.settings.idle_timeout_s)
        conn.sendall(data)

    def _parse(self, line: bytes) -> Request:
        try:
            return parse_request(line, token=self.settings.token)
        except RequestRejected:
            raise
        except Exception as exc:  # noqa: BLE001 - the validator should catch all; never a traceback for input
            logger.warning("admin socket: a request the validator did not expect was rejected ({}: {})",
                           type(exc).__name__, exc)
            raise RequestRejected(BAD_REQUEST, f"request could not be read ({type(exc).__name__})") from None

    def _answer(self, conn: socket.socket, reader: LineReader, line: bytes, state: _Connection,
                asked_at: float) -> bool:
        """Answer one line; True when the connection is done (a follow ended, or evicted)."""
        small = self.settings.max_request_bytes
        try:
            request = self._parse(line)
            if len(line) > small and request.cmd != "send":
                raise RequestRejected(TOO_LARGE, f"request longer than {small} bytes (only send takes up to "
                                                 f"{self.settings.max_send_bytes})", request.id)
        except RequestRejected as exc:
            code = TOO_LARGE if len(line) > small and exc.code == BAD_REQUEST else exc.code
            message = f"request longer than {small} bytes" if code != exc.code else exc.message
            self._send(conn, encode(error_reply(exc.request_id, code, message)))
            return False
        state.authenticated = True
        request = replace(request, caller=state.caller)
        if request.cmd == "follow":
            conn.settimeout(None)  # a follower waits as long as it likes
            self._follow(conn, reader, request)
            return True
        try:
            result = self.handle(request)
        except AdminError as exc:
            reply = error_reply(request.id, exc.code, exc.message)
        except CorvidError as exc:  # a store found down answers `unavailable` (errors.admin_code)
            reply = error_reply(request.id, admin_code(exc), str(exc))
        except Exception as exc:  # noqa: BLE001 - reported to the operator, logged with its traceback
            logger.opt(exception=True).error("admin command {} failed", request.cmd)
            reply = error_reply(request.id, INTERNAL, f"{type(exc).__name__}: {exc}")
        else:
            reply = ok_reply(request.id, result)
        return self._reply(conn, state, asked_at, encode(reply))

    def _reply(self, conn: socket.socket, state: _Connection, asked_at: float, data: bytes) -> bool:
        """Write a reply, the connection idle from the moment it goes out: a client that has
        read its answer finds its connection evictable even if this thread is descheduled
        between the write and its bookkeeping (under load it was, and the cap refused the
        next operator as "all busy"). An eviction meanwhile is carried out here, after the
        reply, never interleaved with it. True when evicted."""
        with self._lock:
            state.idle, state.idle_since, state.replying = True, asked_at, True
        try:
            self._send(conn, data)
        finally:
            with self._lock:
                state.replying = False
                evicted = state.evicted
        if evicted:
            self._notify_evicted(conn)
        return evicted

    # --- follow -------------------------------------------------------------------------------

    def _follow(self, conn: socket.socket, reader: LineReader, request: Request) -> None:
        queue = FollowQueue(self.settings.follow_queue_events)

        def sink(session_id: str, at: str, event: dict[str, Any]) -> None:
            queue.put((session_id, at, event))  # on the EventBus thread: never blocks

        try:
            unfollow = self.follow(request.args.get("session"), sink)
        except CorvidError as exc:  # an AdminError, or the store down while the session is looked up
            conn.sendall(encode(error_reply(request.id, admin_code(exc), str(exc))))
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

    def follow_stats(self) -> dict[str, int]:
        """``{"followers": n, "dropped_events": n}``: the event streams now, and the events
        they lost by falling behind (the metrics read it)."""
        with self._lock:
            return {"followers": len(self._followers), "dropped_events": self._dropped_events}

    @staticmethod
    def _watch_hangup(reader: LineReader, queue: FollowQueue) -> None:
        with contextlib.suppress(OSError, ValueError):
            while reader.readline(DISCARD_CHUNK, None):
                pass  # a follower has nothing more to say; anything it sends is ignored
        queue.hang_up()

    def _pump(self, conn: socket.socket, queue: FollowQueue) -> None:
        while True:
            item, lost = queue.get()
            if lost:
                with self._lock:
                    self._dropped_events += lost
                conn.sendall(encode({"dropped": lost}))
            if item is HANGUP:
                if self._closed:
                    with contextlib.suppress(OSError):
                        conn.sendall(encode({"end": self._end_reason}))
                return
            session_id, at, event = item
            conn.sendall(encode({"session_id": session_id, "at": at, "event": event}))
