"""What the coding tools share: their settings, the output cap, the argument checks and
the wrapper that turns expected failures into error results (see :mod:`.coding`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corvid_actors.tools.base import Handler, ToolContext, ToolError
from corvid_actors.tools.paths import (
    DEFAULT_PROTECTED_PATTERNS,
)
from corvid_actors.tools.shell_guard import (
    GuardSettings,
)
from corvid_actors.vocabulary import ToolResult


@dataclass(frozen=True)
class CodingToolSettings:
    """Limits of the coding tools; defaults are the original's values."""

    output_truncate_chars: int = 8000
    command_timeout_default_s: float = 30
    command_timeout_max_s: float = 120
    list_max_entries: int = 500
    #: glob matches collected before list_files stops looking (huge trees)
    list_glob_scan_max: int = 10_000
    search_max_lines: int = 200
    search_timeout_s: float = 15
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


def is_binary(path: str, sniff_bytes: int) -> bool:
    """Does the file have a NUL in its first ``sniff_bytes`` bytes (grep's test)?"""
    with open(path, "rb") as handle:
        return b"\0" in handle.read(sniff_bytes)
