"""A client of the daemon's admin socket (what ``corvid-actors admin`` and ``events`` use).

    with AdminClient.for_config(load_daemon_config()) as admin:
        sessions = admin.call("sessions")
        admin.call("stop", session="3f2a9c1e")
        for item in admin.follow("3f2a9c1e"):    # {"session_id", "at", "event"} dicts
            ...

Imports nothing of the runtime, so the CLI starts fast.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corvid_actors.errors import CorvidError


class AdminUnavailable(CorvidError):
    """No daemon answers on the socket (or we may not open it)."""


class NoDaemon(AdminUnavailable):
    """Nothing listens on the socket: no daemon runs on that data directory."""


class AdminRequestFailed(CorvidError):
    """The daemon answered with an error reply; ``code`` says which kind."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} [{code}]")
        self.code = code
        self.message = message


class AdminClient:
    """One connection to the admin socket; requests are answered in order."""

    def __init__(self, path: str | Path, *, token: str = "", timeout_s: float | None = 30.0,
                 max_send_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.token = token
        self.timeout_s = timeout_s
        #: refuse (locally) a request line longer than this; None: let the daemon judge
        self.max_send_bytes = max_send_bytes
        self._sock: socket.socket | None = None
        self._reader: Any = None
        self._next_id = 0

    @classmethod
    def for_config(cls, config: Any) -> AdminClient:
        """A client for the daemon of ``config`` (data directory, socket name, token)."""
        d = config.daemon
        path = Path(config.store.data_dir).expanduser() / d.socket_name
        return cls(path, token=d.admin_token, timeout_s=d.admin_client_timeout_s,
                   max_send_bytes=max(d.admin_max_send_bytes, d.admin_max_request_bytes))

    def connect(self) -> AdminClient:
        """Open the connection (:class:`AdminUnavailable` when no daemon answers); returns self."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # An I/O deadline, so a wedged daemon cannot hang the operator's shell.
        sock.settimeout(self.timeout_s)
        try:
            sock.connect(str(self.path))
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            raise NoDaemon(
                f"no corvid-actors daemon is listening on {self.path}; start one with `corvid-actors serve` "
                "(or point at its data directory with --data-dir / CORVID_DATA_DIR)"
            ) from None
        except PermissionError:
            sock.close()
            raise AdminUnavailable(f"permission denied on {self.path}: the daemon belongs to another user") from None
        except OSError as exc:
            sock.close()
            raise AdminUnavailable(f"cannot connect to {self.path}: {exc}") from None
        self._sock = sock
        self._reader = sock.makefile("rb")
        return self

    def close(self) -> None:
        """Close the connection (safe from another thread: a blocked ``follow`` ends)."""
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> AdminClient:
        return self if self._sock is not None else self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, cmd: str, **args: Any) -> int:
        """Write one request; returns its id (read the reply with :meth:`receive`)."""
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        self._next_id += 1
        request: dict[str, Any] = {"id": self._next_id, "cmd": cmd,
                                   "args": {k: v for k, v in args.items() if v is not None}}
        if self.token:
            request["token"] = self.token
        try:
            # UTF-8 as is (not \\u escapes): a message's size on the wire stays its size
            line = json.dumps(request, ensure_ascii=False).encode("utf-8") + b"\n"
        except UnicodeEncodeError:
            raise AdminRequestFailed("bad_request", "the request holds text that is not valid Unicode "
                                                    "(lone surrogates): nothing was sent") from None
        if self.max_send_bytes is not None and len(line) > self.max_send_bytes:
            raise AdminRequestFailed("too_large", f"the request is {len(line)} bytes; the daemon takes at most "
                                                  f"{self.max_send_bytes} (daemon.admin_max_send_bytes)")
        try:
            self._sock.sendall(line)
        except OSError as exc:
            raise AdminUnavailable(f"the daemon closed the connection: {exc}") from None
        return self._next_id

    def receive(self) -> dict[str, Any]:
        """The next line from the daemon, decoded."""
        reader = self._reader
        if reader is None:
            raise AdminUnavailable("the connection is closed")
        try:
            line = reader.readline()
        except TimeoutError:
            raise AdminUnavailable(f"the daemon did not answer within {self.timeout_s} s") from None
        except OSError as exc:
            raise AdminUnavailable(f"the daemon closed the connection: {exc}") from None
        except ValueError:  # close() from another thread released the buffer under readline
            raise AdminUnavailable("the connection was closed") from None
        if not line:
            raise AdminUnavailable("the daemon closed the connection")
        return dict(json.loads(line))

    def call(self, cmd: str, **args: Any) -> Any:
        """Send one command and return its result; raises :class:`AdminRequestFailed`."""
        self.send(cmd, **args)
        return _result(self.receive())

    def wait_closed(self) -> None:
        """Block until the daemon closes this connection (after ``shutdown``: it has stopped).

        No deadline of our own: the daemon exits within its shutdown bound either way."""
        assert self._sock is not None
        self._sock.settimeout(None)
        try:
            while self._reader.readline():
                pass
        except OSError:
            pass

    def follow(self, session: str | None = None) -> Iterator[dict[str, Any]]:
        """Yield ``{"session_id", "at", "event"}`` items until the daemon stops."""
        self.begin_follow(session)
        return self.followed()

    def begin_follow(self, session: str | None = None) -> None:
        """Subscribe now (the daemon has replied when this returns): every event from here
        on waits in the connection for :meth:`followed`."""
        self.send("follow", session=session)
        _result(self.receive())
        assert self._sock is not None
        self._sock.settimeout(None)  # following waits as long as it takes

    def followed(self) -> Iterator[dict[str, Any]]:
        """The items of the stream :meth:`begin_follow` started, until the daemon stops."""
        while True:
            try:
                item = self.receive()
            except AdminUnavailable:
                return
            if "end" in item:
                return
            yield item


def _result(reply: dict[str, Any]) -> Any:
    if reply.get("ok"):
        return reply.get("result")
    error = reply.get("error") or {}
    raise AdminRequestFailed(str(error.get("code", "error")), str(error.get("message", "request failed")))
