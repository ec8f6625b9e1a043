"""The daemon's process plumbing: one daemon per data directory, its directory, its logs,
a self-pipe for signals, and running in the background.

Nothing here knows the runtime: :mod:`corvid_actors.daemon.service` puts these together.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import traceback
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

from loguru import logger

from corvid_actors.config import Config
from corvid_actors.errors import CorvidError

#: the detached daemon's log file, in the data directory
DAEMON_LOG = "daemon.log"
#: lines of that log shown when a detached daemon fails to start
DETACH_LOG_TAIL_LINES = 20


class DaemonError(CorvidError):
    """The daemon cannot start (another one holds the data directory, a bad path, …)."""


class PidLock:
    """An exclusive ``flock`` on the pid file: one daemon per data directory.

    The kernel drops the lock when the process dies, even by SIGKILL, so a stale pid file
    never blocks a restart.
    """

    def __init__(self, path: Path, busy: str | None = None) -> None:
        self.path = path
        #: what a refusal says after "another corvid-actors daemon (pid N) …" (default: the data directory's)
        self._busy = busy
        self._fd: int | None = None

    def _open_locked(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise DaemonError(f"cannot open the pid file {self.path}: {exc.strerror} "
                              "(choose a writable data directory with --data-dir / CORVID_DATA_DIR)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DaemonError(f"another corvid-actors daemon (pid {other}) " + (self._busy or (
                f"is serving {self.path.parent}; stop it with `corvid-actors admin shutdown`, or use another "
                "data directory (--data-dir / CORVID_DATA_DIR)"))) from None
        return fd

    def check(self) -> None:
        """Raise :class:`DaemonError` now when another daemon holds the lock (before a
        ``serve --detach`` forks: the child's failure would land in that daemon's log)."""
        fd = self._open_locked()
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> PidLock:
        fd = self._open_locked()
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            os.close(self._fd)
            self._fd = None


def store_lock(url: str) -> PidLock | None:
    """The lock that keeps a SQLite database file to one daemon (``<file>.daemon-lock``),
    whatever data directory each daemon runs in; None for PostgreSQL (several daemons may
    share it: ``[cluster] enabled``) and an in-memory database."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    database = Path(path).expanduser()
    return PidLock(database.with_name(database.name + ".daemon-lock"), busy=(
        f"uses the SQLite database {database}: a SQLite file serves one daemon. Stop that daemon, or run "
        "several daemons on PostgreSQL (CORVID_DB_URL=postgresql://… and CORVID_CLUSTER=1)"))


def human_format(record: Any) -> str:
    """loguru format of a human log line: UTC time, level, ``[session/agent]``, message."""
    extra = record["extra"]
    tag = ""
    if extra.get("session_id"):
        agent = extra.get("agent")
        turn = extra.get("turn")
        tag = f" [{str(extra['session_id'])[:8]}{'/' + str(agent) if agent else ''}{f'#{turn}' if turn else ''}]"
        tag = tag.replace("{", "{{").replace("}", "}}").replace("<", r"\<")
    trace = " trace={extra[trace_id]}" if extra.get("trace_id") else ""
    return ("<green>{time:YYYY-MM-DDTHH:mm:ss.SSS!UTC}Z</green> <level>{level: <7}</level>" + tag + " {message}"
            + trace + "\n{exception}")


def json_sink(stream: TextIO) -> Callable[[Any], None]:
    """A loguru sink writing one compact JSON object per record: ``time`` (ISO 8601 UTC,
    ``Z``), ``level``, ``message``, ``session_id`` and ``agent`` when bound, every other
    bound field, and ``exception`` (the traceback text) when there is one — not loguru's
    whole serialised record."""

    def write(message: Any) -> None:
        stream.write(json_line(message.record) + "\n")
        stream.flush()

    return write


def json_line(record: Any) -> str:
    """One loguru record as the compact JSON object :func:`json_sink` writes (no newline)."""
    line: dict[str, Any] = {
        "time": record["time"].astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "level": record["level"].name,
        "message": record["message"],
    }
    line.update({k: v for k, v in record["extra"].items() if v not in ("", None)})
    if record["exception"] is not None:
        line["exception"] = "".join(traceback.format_exception(*record["exception"])).rstrip()
    return json.dumps(line, default=str, ensure_ascii=False)


def configure_logging(config: Config, stream: TextIO | None = None) -> None:
    """Log to ``stream`` (stderr): human lines, or JSON lines with ``log_format = "json"``."""
    stream = stream or sys.stderr
    settings = config.daemon
    logger.remove()
    logger.configure(extra={"session_id": "", "agent": ""})
    level = settings.log_level.upper()
    logger.enable("corvid_actors")  # a library is silent (corvid_actors/__init__); the daemon logs
    if settings.log_format == "json":
        logger.add(json_sink(stream), level=level, format="{message}", backtrace=False, diagnose=False)
    else:
        # diagnose=False: tracebacks must not print variable values (API keys, prompts)
        logger.add(stream, level=level, format=human_format, colorize=stream.isatty(),
                   backtrace=False, diagnose=False)


class Wakeup:
    """A self-pipe: signal handlers and other threads post one byte; the main thread reads."""

    SIGINT, SIGTERM, ADMIN, DONE, OVERDUE = b"i", b"t", b"a", b"d", b"o"
    #: time to tell systemd the main loop is alive (``daemon/systemd.py``)
    WATCHDOG = b"w"
    #: SIGHUP: re-open the log file (``daemon/logs.py``)
    SIGHUP = b"h"

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)

    def post(self, code: bytes) -> None:
        """Wake the main thread with ``code``; never blocks (safe in a signal handler)."""
        try:
            os.write(self._w, code)
        except OSError:  # pipe full: the main thread has plenty to read already
            pass

    def read(self) -> bytes:
        """The next code posted (blocks until there is one); main thread only."""
        return os.read(self._r, 1)


def redacted(url: str) -> str:
    """A database URL fit for logs: its password replaced."""
    password = urlparse(url).password
    return url.replace(f":{password}@", ":***@") if password else url


def prepare_data_dir(path: Path) -> Path:
    """Create the data directory owner-only (0700); warn when an existing one is wider."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise DaemonError(f"cannot create the data directory {path}: {exc.strerror} "
                          "(set --data-dir or CORVID_DATA_DIR)") from None
    if not path.is_dir():
        raise DaemonError(f"the data directory {path} is not a directory (set --data-dir or CORVID_DATA_DIR)")
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise DaemonError(f"the data directory {path} is not writable by this user "
                          "(fix its permissions, or set --data-dir or CORVID_DATA_DIR)")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        logger.warning("data directory {} has mode {:o}: other users may read the database (chmod 700 it)",
                       path, mode)
    return path


def detach(log_path: Path, run: Callable[[Callable[[dict[str, Any]], None]], int],
           configure: Callable[[], None]) -> dict[str, Any] | None:
    """Run ``run(ready)`` in a forked child of its own session, with stdout and stderr in
    ``log_path``; return in the parent once the child called ``ready(about)`` (its ``about``),
    ``{"error": text}`` when it failed to start with a :class:`CorvidError`, or None when it
    ended otherwise. Call this before any thread exists (fork).

    The parent blocks reading a pipe: the child's "ready" or "error" line, or end of file
    when it died — it never polls.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            line = pipe.readline()
        return json.loads(line) if line else None
    code = 1
    try:
        os.close(read_end)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        configure()

        def ready(about: dict[str, Any]) -> None:
            os.write(write_end, json.dumps(about).encode() + b"\n")
            os.close(write_end)

        code = run(ready)
    except CorvidError as exc:
        logger.error("the daemon could not start: {}", exc)
        try:
            os.write(write_end, json.dumps({"error": str(exc)}).encode() + b"\n")
        except OSError:  # already told "ready": the parent is gone
            pass
    except BaseException:  # noqa: BLE001 - the child must end here, whatever happened
        logger.exception("the daemon failed")
    finally:
        os._exit(code)


def log_tail(path: Path, lines: int = DETACH_LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file (or why it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
