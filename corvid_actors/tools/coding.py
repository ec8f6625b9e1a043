"""The six coding tools: read_file, write_file, edit_file, list_files, search_files, run_command.

Every tool is confined to the project directory (``corvid_actors.tools.paths``) and
refuses protected paths itself, in addition to the permission check that runs before it
(defense in depth: a wiring mistake upstream must not open ``.env``). Expected failures
— a missing or invalid argument, a file not found, a denied path — come back as an
error :class:`ToolResult` the model can act on; handlers never raise for bad input.

Handlers run on a session's worker thread and may block. The two that can run long
(``run_command``, ``search_files``) schedule their time limit with ``ctx.call_later``
and stop at once on ``ctx.cancel``; neither reads a clock. ``run_command`` runs its shell
in the OS sandbox given as ``ctx.sandbox`` (``corvid_actors.tools.sandbox``; its mode
decides what happens when none can run); ``search_files`` matches with RE2, in linear time.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import glob
import os
import re
import selectors
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from corvid_actors.tools.base import Handler, Tool, ToolContext, ToolError
from corvid_actors.tools.paths import (
    DEFAULT_PROTECTED_PATTERNS,
    is_protected,
    is_within,
    relative_to_project,
    resolve_in_project,
)
from corvid_actors.tools.shell_guard import (
    GuardSettings,
    blocked_command,
    expand_braces,
    protected_write_target,
)
from corvid_actors.vocabulary import ToolKind, ToolResult, ToolSpec


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


def _result(text: str, settings: CodingToolSettings, is_error: bool = False) -> ToolResult:
    shown = truncate_middle(text, settings.output_truncate_chars)
    return ToolResult(shown, is_error, full_output=text if shown != text else None)


def _error(message: str) -> ToolResult:
    return ToolResult(message, is_error=True)


# --- argument checks --------------------------------------------------------------------


def _text(args: dict[str, Any], name: str, *, empty_ok: bool = False) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolError(f"Invalid '{name}': expected a string, got {type(value).__name__}")
    if not value and not empty_ok:
        raise ToolError(f"Invalid '{name}': must not be empty")
    return value


def _required(args: dict[str, Any], name: str, *, empty_ok: bool = False) -> str:
    value = _text(args, name, empty_ok=empty_ok)
    if value is None:
        raise ToolError(f"Missing required parameter '{name}'")
    return value


def _number(args: dict[str, Any], name: str, *, integer: bool) -> float | None:
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


def _patterns(ctx: ToolContext) -> tuple[str, ...]:
    # an empty tuple means "not configured", never "nothing is protected"
    return tuple(ctx.protected_patterns) or DEFAULT_PROTECTED_PATTERNS


def _guarded(handler: Handler) -> Handler:
    """Turn expected failures (ToolError, PathDenied, OSError) into error results."""

    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            return handler(args if isinstance(args, dict) else {}, ctx)
        except ToolError as exc:
            return _error(str(exc))
        except OSError as exc:
            target = f": {exc.filename}" if exc.filename else ""
            return _error(f"{exc.strerror or exc}{target}")

    return run


# --- file tools -------------------------------------------------------------------------


def _is_binary(path: str, sniff_bytes: int) -> bool:
    with open(path, "rb") as handle:
        return b"\0" in handle.read(sniff_bytes)


def _read_file(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = _required(args, "path")
    offset = int(_number(args, "offset", integer=True) or 1)
    limit = _number(args, "limit", integer=True)
    path = resolve_in_project(ctx.project_dir, raw)
    if is_protected(ctx.project_dir, raw, _patterns(ctx)):
        return _error(f"Cannot read protected file: {raw}")
    if not path.exists():
        return _error(f"File not found: {raw}")
    if path.is_dir():
        return _error(f"{raw} is a directory: use list_files to see its contents")
    if limit is None and path.stat().st_size > settings.read_max_file_bytes:
        return _error(f"{raw} is {path.stat().st_size} bytes: read it in parts with offset and limit")
    if _is_binary(str(path), settings.binary_sniff_bytes):
        return _error(f"{raw} is a binary file")
    last = None if limit is None else offset + int(limit) - 1
    lines, total = [], 0
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        for number, line in enumerate(handle, start=1):
            total = number
            if number >= offset and (last is None or number <= last):
                text = line.rstrip("\r\n")
                lines.append(f"{number}\t{text}")
            elif last is not None and number > last:
                break
    if total == 0:
        return ToolResult(f"(empty file: {raw})")
    if not lines:
        return _error(f"Invalid 'offset': {offset} is past the end of {raw} ({total} lines)")
    return _result("\n".join(lines), settings)


def _refuse_protected(ctx: ToolContext, raw: str) -> None:
    if is_protected(ctx.project_dir, raw, _patterns(ctx)):
        raise ToolError(f"Cannot modify protected file: {raw}")


def _write_file(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = _required(args, "path")
    content = _required(args, "content", empty_ok=True)
    path = resolve_in_project(ctx.project_dir, raw)
    _refuse_protected(ctx, raw)
    if path.is_dir():
        return _error(f"{raw} is a directory: give a file path")
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(content)
    verb = "Overwrote" if existed else "Created"
    return ToolResult(f"{verb} {raw} ({len(content)} chars)")


def _edit_file(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = _required(args, "path")
    old = _required(args, "old_string")
    new = _required(args, "new_string", empty_ok=True)
    path = resolve_in_project(ctx.project_dir, raw)
    _refuse_protected(ctx, raw)
    if old == new:
        return _error("old_string and new_string are identical: nothing to change")
    if not path.is_file():
        return _error(f"File not found: {raw}")
    try:
        with open(path, encoding="utf-8", errors="strict", newline="") as handle:
            text = handle.read()
    except UnicodeDecodeError:
        return _error(f"{raw} is not UTF-8 text: edit_file only edits text files")
    count = text.count(old)
    if count == 0:
        return _error(f"old_string not found in {raw}: read the file first and copy the exact text")
    if count > 1:
        return _error(
            f"old_string occurs {count} times in {raw}: include more context to make it unique"
        )
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(text.replace(old, new, 1))
    return ToolResult(f"Edited {raw}")


def _capped(lines: list[str], total: int, limit: int, what: str) -> str:
    more = f"\n... ({total - limit} more {what} not shown: narrow the path)" if total > limit else ""
    return "\n".join(lines[:limit]) + more


def _list_glob(settings: CodingToolSettings, raw: str, ctx: ToolContext) -> ToolResult:
    if os.path.isabs(raw) or ".." in re.split(r"[\\/]", raw) or raw.startswith("~"):
        return _error(f"Invalid 'path': the glob {raw} must stay inside the project")
    root = os.path.realpath(ctx.project_dir)
    found: set[str] = set()
    for pattern in expand_braces(raw, settings.guard.brace_max_expansions):
        # like the original (Bun glob): no dotfiles unless the pattern names them
        for match in glob.iglob(pattern, root_dir=root, recursive=True):
            if is_within(os.path.realpath(os.path.join(root, match)), root):
                found.add(match.replace(os.sep, "/"))
            if len(found) >= settings.list_glob_scan_max:
                break
    if not found:
        return ToolResult(f"No files match {raw}")
    lines = sorted(found)
    text = _capped(lines, len(lines), settings.list_max_entries, "files")
    if len(found) >= settings.list_glob_scan_max:
        text += f"\n(stopped looking after {settings.list_glob_scan_max} matches)"
    return _result(text, settings)


def _list_files(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = _text(args, "path") or "."
    if re.search(r"[*?{\[]", raw):
        return _list_glob(settings, raw, ctx)
    path = resolve_in_project(ctx.project_dir, raw)
    if not path.exists():
        return _error(f"Not found: {raw}")
    if not path.is_dir():
        return ToolResult(f"{relative_to_project(ctx.project_dir, path)}  ({path.stat().st_size} bytes)")
    entries = sorted(os.scandir(path), key=lambda e: e.name)
    if not entries:
        return ToolResult(f"(empty directory: {raw})")
    lines = [_describe_entry(entry) for entry in entries[: settings.list_max_entries]]
    return _result(_capped(lines, len(entries), settings.list_max_entries, "entries"), settings)


def _describe_entry(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return f"{entry.name} -> {os.readlink(entry.path)}"
    if entry.is_dir():
        return f"{entry.name}/"
    return f"{entry.name}  ({entry.stat().st_size} bytes)"


def _search_tree(
    settings: CodingToolSettings, ctx: ToolContext, raw: str, regex: Any,
    file_glob: str | None, should_stop: Callable[[], bool],
) -> list[str]:
    """grep -rnI in Python: "path:line:text" for each match, protected files skipped."""
    start = resolve_in_project(ctx.project_dir, raw)
    root, patterns = os.path.realpath(ctx.project_dir), _patterns(ctx)
    if start.is_file():
        files: Iterable[str] = [str(start)]
    else:
        files = _walk_files(str(start), settings.search_skip_dirs)
    hits: list[str] = []
    for path in files:
        if should_stop() or len(hits) > settings.search_max_lines:
            break
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if file_glob and not fnmatch.fnmatch(rel if "/" in file_glob else os.path.basename(rel),
                                             file_glob):
            continue
        real = os.path.realpath(path)
        if (not is_within(real, root) or is_protected(root, rel, patterns)
                or os.path.getsize(real) > settings.search_max_file_bytes
                or _is_binary(real, settings.binary_sniff_bytes)):
            continue  # outside (symlink), secret, huge or binary: grep -I skips binaries too
        with open(real, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                if regex.search(line):
                    text = line.rstrip("\r\n")[: settings.search_line_max_chars]
                    hits.append(f"{rel}:{number}:{text}")
                    if len(hits) > settings.search_max_lines:
                        break
    return hits


def _walk_files(start: str, skip_dirs: tuple[str, ...]) -> Iterator[str]:
    for directory, dirs, files in os.walk(start):
        dirs[:] = sorted(d for d in dirs if d not in skip_dirs)
        for name in sorted(files):
            yield os.path.join(directory, name)


def compile_search_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (``google-re2``): matching takes linear time, so no
    pattern can hold a worker (and the GIL) for minutes as ``(a+)+$`` does in ``re``.
    RE2 has no backreferences or lookaround; such a pattern is a clear ToolError."""
    try:
        import re2  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - google-re2 is a dependency
        try:
            return re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"Invalid 'pattern': not a valid regular expression ({exc})") from None
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        detail = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) \
            else str(exc)
        raise ToolError(f"Invalid 'pattern': not a valid regular expression ({detail}); search_files "
                        "uses RE2 syntax (linear time): no backreferences or lookaround") from None


def _search_files(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    pattern = _required(args, "pattern")
    raw = _text(args, "path") or "."
    file_glob = _text(args, "glob")
    regex = compile_search_pattern(pattern)
    stop = threading.Event()
    cancel_timer = ctx.call_later(settings.search_timeout_s, stop.set)
    try:
        hits = _search_tree(settings, ctx, raw, regex, file_glob,
                            lambda: stop.is_set() or ctx.cancel.cancelled)
    finally:
        cancel_timer()
    if not hits:
        text = f"No matches for {pattern}"
    else:
        text = "\n".join(hits[: settings.search_max_lines])
        if len(hits) > settings.search_max_lines:
            text += f"\n... (more than {settings.search_max_lines} matching lines: narrow the search)"
    if stop.is_set():
        text += f"\n(search stopped after {settings.search_timeout_s:g} s: narrow path or glob)"
    return _result(text, settings)


# --- run_command ------------------------------------------------------------------------


class _Capture:
    """One output stream, bounded: the head and the tail are kept, the middle dropped."""

    def __init__(self, limit: int) -> None:
        self._half = max(1, limit // 2)
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self._half - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        self._tail += chunk
        excess = len(self._tail) - self._half
        if excess > 0:
            del self._tail[:excess]
            self._dropped += excess

    def text(self) -> str:
        dropped = f"\n... [{self._dropped} bytes dropped] ...\n" if self._dropped else ""
        return (self._head.decode("utf-8", "replace") + dropped
                + self._tail.decode("utf-8", "replace"))


def _drain(proc: subprocess.Popen[bytes], settings: CodingToolSettings,
           wake_fd: int | None = None) -> tuple[str, str]:
    """Read stdout and stderr until both reach EOF. ``wake_fd`` gets one byte when the
    command is killed and a second one a grace period later: from then on what is
    already buffered is read and the rest abandoned (a process that left the group, an
    unconfined ``setsid``, may hold the pipes open for ever)."""
    assert proc.stdout is not None and proc.stderr is not None
    captures = {
        proc.stdout.fileno(): _Capture(settings.command_capture_max_bytes),
        proc.stderr.fileno(): _Capture(settings.command_capture_max_bytes),
    }
    with selectors.DefaultSelector() as selector:
        for fd in captures:
            selector.register(fd, selectors.EVENT_READ)
        if wake_fd is not None:
            selector.register(wake_fd, selectors.EVENT_READ)
        wakes = 0
        while any(fd in captures for fd in selector.get_map()):
            ready = selector.select(timeout=0 if wakes >= 2 else None)
            if wakes >= 2 and not ready:
                break
            for key, _ in ready:
                if key.fd == wake_fd:
                    wakes += len(os.read(wake_fd, 2))
                    if wakes >= 2:
                        selector.unregister(wake_fd)
                    continue
                chunk = os.read(key.fd, settings.command_read_chunk_bytes)
                if chunk:
                    captures[key.fd].add(chunk)
                else:
                    selector.unregister(key.fd)
    out, err = captures.values()
    return out.text(), err.text()


def _confinement(ctx: ToolContext, argv: list[str]) -> tuple[Any, list[str], str | None]:
    """(launch or None, argv to run, refusal): the sandbox decides how ``argv`` runs."""
    sandbox = ctx.sandbox
    if sandbox is None or sandbox.status.mode == "off":
        return None, argv, None
    if not sandbox.active:
        if sandbox.status.refuses_commands:
            return None, argv, ("Refused: commands must run in the OS sandbox "
                                "([tools.sandbox] mode = \"required\") and it is unavailable: "
                                f"{sandbox.status.reason}")
        return None, argv, None  # auto: warned once per daemon start and per session
    from corvid_actors.tools.sandbox import SandboxUnavailable

    try:
        launch = sandbox.wrap(argv, project_dir=str(ctx.project_dir), network=ctx.sandbox_network,
                              patterns=_patterns(ctx))
    except SandboxUnavailable as exc:
        return None, argv, f"Refused: the command cannot be sandboxed: {exc}"
    return launch, launch.argv, None


def _run_command(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    command = _required(args, "command")
    requested = _number(args, "timeout", integer=False)
    timeout = min(requested or settings.command_timeout_default_s, settings.command_timeout_max_s)
    reason = blocked_command(command, settings.guard)
    if reason is not None:
        return _error(reason)
    target = protected_write_target(command, ctx.project_dir, _patterns(ctx), settings.guard)
    if target is not None:
        return _error(f"Cannot modify protected file: {target} "
                      "(commands may not mention protected paths, even to read them)")
    if ctx.cancel.cancelled:
        return _error("Command cancelled before it started")
    launch, argv, refusal = _confinement(ctx, [settings.command_shell, "-c", command])
    if refusal is not None:
        return _error(refusal)
    wake_r, wake_w = os.pipe()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=os.path.realpath(ctx.project_dir),
            env=dict(ctx.env),  # exactly the allowlisted environment, never os.environ
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a kill reaches grandchildren
        )
    except BaseException:
        os.close(wake_r)
        os.close(wake_w)
        if launch is not None:
            launch.finish(ctx.sandbox, _patterns(ctx))
        raise
    ended_by: list[str] = []
    give_up: list[Callable[[], None]] = []

    def wake() -> None:
        with contextlib.suppress(OSError):
            os.write(wake_w, b"x")

    def kill(why: str) -> None:
        # sandboxed: the group holds the outer bwrap, whose death ends the PID namespace
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return  # the whole group has already exited: nothing was cut short
        if not ended_by:
            ended_by.append(why)
            wake()
            give_up.append(ctx.call_later(settings.command_kill_grace_s, wake))

    cancel_timer = ctx.call_later(timeout, lambda: kill("timeout"))
    unregister = ctx.cancel.on_cancel(lambda: kill("cancelled"))
    removed: list[str] = []
    try:
        stdout, stderr = _drain(proc, settings, wake_r)
        code = proc.wait()
    finally:
        cancel_timer()
        unregister()
        if proc.poll() is None:  # left by an unexpected error: never leak the group
            kill("error")
            proc.wait()
        for cancel in give_up:
            cancel()  # before the pipe is closed: its number may be reused at once
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
        os.close(wake_r)
        os.close(wake_w)
        if launch is not None:
            removed = launch.finish(ctx.sandbox, _patterns(ctx))
    if removed:
        stderr += ("\n[sandbox] removed protected files the command created: "
                   + ", ".join(removed))
    output = stdout + (f"\n[stderr]\n{stderr}" if stderr else "")
    if ended_by and ended_by[0] == "timeout":
        return _result(f"Command timed out after {timeout:g} s\n{output}".rstrip(), settings, True)
    if ended_by:
        return _result(f"Command cancelled\n{output}".rstrip(), settings, True)
    if not output:
        output = f"(no output, exit code: {code})"
    if code != 0:
        return _result(f"Exit code {code}\n{output}", settings, True)
    return _result(output, settings)


# --- specs ------------------------------------------------------------------------------


def _schema(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


_PATH = {"type": "string", "description": "Path relative to the project directory"}

_SPECS: dict[str, tuple[ToolKind, str, dict[str, Any]]] = {
    "read_file": (ToolKind.READ, "Read a text file. Lines come numbered as 'N<TAB>text'.",
                  _schema(["path"], path=_PATH,
                          offset={"type": "integer", "description": "First line to read (1-based)"},
                          limit={"type": "integer", "description": "Number of lines to read"})),
    "write_file": (ToolKind.EDIT, "Create or overwrite a file with the given content "
                                  "(parent directories are created).",
                   _schema(["path", "content"], path=_PATH,
                           content={"type": "string", "description": "The complete new content"})),
    "edit_file": (ToolKind.EDIT, "Replace one exact occurrence of old_string with new_string. "
                                 "old_string must occur exactly once: include enough context.",
                  _schema(["path", "old_string", "new_string"], path=_PATH,
                          old_string={"type": "string", "description": "Exact text to replace"},
                          new_string={"type": "string", "description": "Replacement text"})),
    "list_files": (ToolKind.READ, "List a directory, or the files matching a glob "
                                  "(e.g. 'src/**/*.py').",
                   _schema([], path={"type": "string",
                                     "description": "Directory or glob (default '.')"})),
    "search_files": (ToolKind.READ, "Search file contents with a regular expression; answers "
                                    "'path:line:text'.",
                     _schema(["pattern"],
                             pattern={"type": "string", "description": "Regular expression"},
                             path={"type": "string", "description": "Directory or file (default '.')"},
                             glob={"type": "string", "description": "Only files matching, e.g. '*.py'"})),
    "run_command": (ToolKind.COMMAND, "Run a shell command (sh -c) in the project directory.",
                    _schema(["command"], command={"type": "string", "description": "The command"},
                            timeout={"type": "number",
                                     "description": "Seconds before it is killed (default 30, max 120)"})),
}

_HANDLERS = {
    "read_file": _read_file, "write_file": _write_file, "edit_file": _edit_file,
    "list_files": _list_files, "search_files": _search_files, "run_command": _run_command,
}

#: the names of the six coding tools
CODING_TOOL_NAMES: tuple[str, ...] = tuple(_SPECS)


def coding_tools(settings: CodingToolSettings = CodingToolSettings()) -> list[Tool]:
    """The six coding tools, bound to ``settings``."""
    tools = []
    for name, (kind, description, parameters) in _SPECS.items():
        bound = _guarded(functools.partial(_HANDLERS[name], settings))
        tools.append(Tool(ToolSpec(name, description, parameters), kind, bound))
    return tools


def describe_tool_call(
    name: str, args: dict[str, Any], settings: CodingToolSettings = CodingToolSettings()
) -> str:
    """One line for an approval request (the original's formatToolDescription)."""
    def arg(*keys: str) -> str:
        return next((str(args[k]) for k in keys if isinstance(args, dict) and args.get(k)), "")

    if name in ("run_command", "Bash"):
        return f"Run command: {arg('command')[: settings.description_command_max_chars]}"
    labels = {
        "write_file": "Write file", "Write": "Write file", "edit_file": "Edit file",
        "Edit": "Edit file", "MultiEdit": "Edit file", "read_file": "Read file",
        "Read": "Read file", "list_files": "List files", "Glob": "List files",
    }
    if name in labels:
        return f"{labels[name]}: {arg('path', 'file_path', 'pattern') or '.'}"
    if name in ("search_files", "Grep"):
        return f"Search: {arg('pattern')}"
    if name in ("WebFetch", "web_fetch"):
        return f"Fetch URL: {arg('url')}"
    if name in ("WebSearch", "web_search", "corvid_web_search"):
        return f"Web search: {arg('query')}"
    if name == "corvid_send_message":
        from corvid_actors.tools.corvid_tools import describe_send_message

        return describe_send_message(args)
    return f"Use tool: {name}"
