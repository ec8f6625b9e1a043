"""What the coding tools share: their settings, the output cap, the argument checks and
the wrapper that turns expected failures into error results (see :mod:`.coding`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from corvid_actors.core.vocabulary import ToolResult
from corvid_actors.tools.base import Handler, PathDenied, ToolContext, ToolError
from corvid_actors.tools.paths import DEFAULT_PROTECTED_PATTERNS, compile_patterns
from corvid_actors.tools.safe_open import Check, special_kind
from corvid_actors.tools.shell_guard import (
    GuardSettings,
)


@dataclass(frozen=True)
class CodingToolSettings:
    """Limits of the coding tools; defaults are the original's values."""

    output_truncate_chars: int = 8000
    command_timeout_default_s: float = 30
    command_timeout_max_s: float = 120
    list_max_entries: int = 500
    #: entries a list_files glob (or directory listing) visits before it stops looking;
    #: directory symlinks are never followed, so this bounds the walk
    list_walk_max_entries: int = 20_000
    #: a list_files glob stops looking after this long (and at once on a session stop)
    list_timeout_s: float = 15
    search_max_lines: int = 200
    search_timeout_s: float = 15
    #: entries search_files visits before it stops (besides its time limit)
    search_walk_max_entries: int = 200_000
    #: special files (FIFOs, sockets, devices) named in search_files' "skipped" note
    search_skipped_shown: int = 10
    #: longest matching line shown by search_files (minified files have huge lines)
    search_line_max_chars: int = 500
    #: files bigger than this are not searched
    search_max_file_bytes: int = 5_000_000
    #: directories search_files never enters (the original's grep excludes)
    search_skip_dirs: tuple[str, ...] = (".git", "node_modules", "dist")
    #: leading bytes inspected for a NUL to call a file binary
    binary_sniff_bytes: int = 8192
    #: read_file without offset/limit refuses files bigger than this
    read_max_file_bytes: int = 10_000_000
    #: command output kept in memory per stream (head and tail; the middle is dropped)
    command_capture_max_bytes: int = 8 * 1024 * 1024  # the operator keeps all of a 1 MiB+ output
    command_read_chunk_bytes: int = 65536
    command_shell: str = "/bin/sh"
    #: after a kill, how long output is still read before pipes held by escaped
    #: processes are abandoned (unconfined commands only; a sandbox leaves no holder)
    command_kill_grace_s: float = 1.0
    #: "Run command: <cmd>" approval descriptions are cut here (formatToolDescription)
    description_command_max_chars: int = 400
    guard: GuardSettings = field(default_factory=GuardSettings)


def truncate_middle(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` chars by dropping the middle, with the original's
    marker (coding-tools.ts ``truncateOutput``): ``⌊limit/2⌋ − 30`` characters from each
    end around ``"... [N characters truncated] ..."``, N being what was left out."""
    if len(text) <= limit:
        return text
    half = max(0, limit // 2 - min(30, limit // 4))  # the 30 leaves room for the marker
    omitted = len(text) - 2 * half
    marker = f"\n\n... [{omitted} characters truncated] ...\n\n"
    return text[:half] + marker + text[len(text) - half:]


def output_result(text: str, settings: CodingToolSettings, is_error: bool = False) -> ToolResult:
    """``text`` as a result, cut to the output cap (the whole kept as ``full_output``)."""
    shown = truncate_middle(text, settings.output_truncate_chars)
    return ToolResult(shown, is_error, full_output=text if shown != text else None)


def error_result(message: str) -> ToolResult:
    """An error result the model can act on."""
    return ToolResult(message, is_error=True)


# --- argument checks --------------------------------------------------------------------


def text_arg(args: dict[str, Any], name: str, *, empty_ok: bool = False) -> str | None:
    """The string argument ``name``, or None when absent (ToolError when not a string or empty)."""
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolError(f"Invalid '{name}': expected a string, got {type(value).__name__}")
    if not value and not empty_ok:
        raise ToolError(f"Invalid '{name}': must not be empty")
    return value


def required_arg(args: dict[str, Any], name: str, *, empty_ok: bool = False) -> str:
    """The string argument ``name`` (ToolError when missing)."""
    value = text_arg(args, name, empty_ok=empty_ok)
    if value is None:
        raise ToolError(f"Missing required parameter '{name}'")
    return value


def number_arg(args: dict[str, Any], name: str, *, integer: bool) -> float | None:
    """The positive number argument ``name`` (quoted numbers accepted), or None when absent."""
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, str):  # models often quote numbers
        try:
            value = float(value.strip())
        except ValueError:
            raise ToolError(f"Invalid '{name}': expected a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ToolError(f"Invalid '{name}': must be a positive number, got {value!r}")
    if integer and value != int(value):
        raise ToolError(f"Invalid '{name}': must be a whole number, got {value!r}")
    return int(value) if integer else float(value)


def protected_patterns_of(ctx: ToolContext) -> tuple[str, ...]:
    """The protected-path patterns in force for this call."""
    # an empty tuple means "not configured", never "nothing is protected"
    return tuple(ctx.protected_patterns) or DEFAULT_PROTECTED_PATTERNS


def guarded(handler: Handler) -> Handler:
    """Turn expected failures (ToolError, PathDenied, OSError) into error results."""

    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            return handler(args if isinstance(args, dict) else {}, ctx)
        except ToolError as exc:
            return error_result(str(exc))
        except OSError as exc:
            target = f": {exc.filename}" if exc.filename else ""
            return error_result(f"{exc.strerror or exc}{target}")

    return run


# --- file tools -------------------------------------------------------------------------


#: the settings a caller gets when it passes none (the original's values)
DEFAULT_SETTINGS = CodingToolSettings()


#: how the file tools open a file to write, or to edit in place: never blocking on a FIFO
#: (no reader: ENXIO) and never taking a terminal as the controlling one
WRITE_FLAGS = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY
EDIT_FLAGS = os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY


@contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    """``fd``, closed when the block ends."""
    try:
        yield fd
    finally:
        os.close(fd)


def read_all(fd: int) -> bytes:
    """Everything from ``fd``'s position to its end."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (a regular file: short writes only continue)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def not_regular(raw: str, mode: int, tool: str) -> ToolResult:
    """The error for a FIFO, socket or device node named to a file tool."""
    return error_result(f"{raw} is not a regular file ({special_kind(mode)}): {tool} "
                        "works on regular files only")


def refusal(ctx: ToolContext, message: str) -> Check:
    """A :class:`~corvid_actors.tools.safe_open.ProjectTree` check refusing (with
    ``message``) a resolved path that is protected: the name actually opened, after
    symlinks, is judged as well as the name the model wrote."""
    compiled = compile_patterns(protected_patterns_of(ctx))

    def check(parts: tuple[str, ...]) -> None:
        if compiled.matches(list(parts)):
            raise PathDenied(message)

    return check
