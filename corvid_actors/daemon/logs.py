"""Logs an operator can keep: a log file with loguru's own rotation, retention and
compression, re-opened on SIGHUP (for an external logrotate), and the context of each
record — ``session_id``, ``agent``, ``turn``, and ``trace_id`` while an OpenTelemetry span is
active — so that logs, events and traces join.

``[daemon] log_file`` (relative to the data directory; "" keeps stderr, or ``daemon.log``
under ``serve --detach``) with ``log_rotation`` ("10 MB", "1 day", "00:00"),
``log_retention`` ("14 days", or a count of files) and ``log_compression`` ("gz", "zip"),
each passed to loguru as is ("" leaves it out).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from loguru import logger

from corvid_actors.config import Config
from corvid_actors.daemon.process import human_format, json_line, json_sink

#: ``session_id -> {"agent": ..., "turn": ...}`` for the sessions a record may name
SessionFields = Callable[[str], Mapping[str, Any]]


def _trace_id_reader() -> Callable[[], str | None]:
    """The active OpenTelemetry span's trace id (32 hex digits), when opentelemetry-api is
    installed and a valid span is current; else None. One cheap lookup per record."""
    try:
        from opentelemetry import trace
    except ImportError:
        return lambda: None

    def current() -> str | None:
        context = trace.get_current_span().get_span_context()
        return format(context.trace_id, "032x") if context.is_valid else None

    return current


class DaemonLogs:
    """The daemon's log sinks: stderr (or the detached daemon's ``daemon.log`` behind it)
    or ``[daemon] log_file``; :meth:`reopen` on SIGHUP (main thread)."""

    def __init__(self, config: Config, data_dir: Path, detached_log: Path | None = None) -> None:
        self.settings = config.daemon
        name = self.settings.log_file
        #: loguru's own file sink, when one is configured
        self.path: Path | None = (data_dir / Path(name).expanduser()) if name else None
        #: ``serve --detach`` without a log file: stdout and stderr are this file
        self.detached_log = detached_log if self.path is None else None
        self._session_fields: SessionFields | None = None
        self._trace_id = _trace_id_reader()

    def open(self) -> None:
        """Replace every sink by the daemon's (stderr, or the log file)."""
        level = self.settings.log_level.upper()
        logger.remove()
        logger.configure(extra={"session_id": "", "agent": ""}, patcher=self._patch)
        logger.enable("corvid_actors")
        json_lines = self.settings.log_format == "json"
        if self.path is None:
            stream = sys.stderr
            if json_lines:
                logger.add(json_sink(stream), level=level, format="{message}", backtrace=False, diagnose=False)
            else:
                logger.add(stream, level=level, format=human_format, colorize=stream.isatty(),
                           backtrace=False, diagnose=False)
            return
        options: dict[str, Any] = {}
        for key, value in (("rotation", self.settings.log_rotation), ("retention", self.settings.log_retention),
                           ("compression", self.settings.log_compression)):
            if value:
                options[key] = int(value) if key == "retention" and value.isdigit() else value
        # diagnose=False: tracebacks must not print variable values (API keys, prompts)
        # a callable format: loguru appends nothing (the JSON line holds the traceback); the
        # files are the owner's only, as the data directory (they may quote prompts)
        logger.add(str(self.path), level=level, format=_json_format if json_lines else human_format,
                   backtrace=False, diagnose=False, encoding="utf-8", opener=_owner_only, **options)

    def follow_sessions(self, fields: SessionFields) -> None:
        """Name each record's agent and turn from ``fields`` (the AdminActor's view)."""
        self._session_fields = fields

    def reopen(self) -> None:
        """SIGHUP: open the log file anew (after an external logrotate renamed it)."""
        if self.path is not None:
            self.open()  # loguru opens the path again: a renamed file is left to logrotate
        elif self.detached_log is not None:
            fd = os.open(self.detached_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        else:
            return
        logger.info("log re-opened (SIGHUP)")

    def _patch(self, record: Any) -> None:
        extra = record["extra"]
        sid = extra.get("session_id")
        if sid and self._session_fields is not None:
            for key, value in self._session_fields(str(sid)).items():
                if not extra.get(key):
                    extra[key] = value
        trace_id = self._trace_id()
        if trace_id is not None:
            extra["trace_id"] = trace_id
        if self.path is not None and self.settings.log_format == "json":
            extra["_json"] = json_line(record)


def _json_format(record: Any) -> str:
    return "{extra[_json]}\n"


def _owner_only(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)
