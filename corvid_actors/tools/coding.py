"""The six coding tools: read_file, write_file, edit_file, list_files, search_files, run_command.

Every tool is confined to the project directory (``corvid_actors.tools.paths``) and
refuses protected paths itself, in addition to the permission check that runs before it
(defense in depth: a wiring mistake upstream must not open ``.env``). Expected failures
— a missing or invalid argument, a file not found, a denied path — come back as an
error :class:`ToolResult` the model can act on; handlers never raise for bad input.

Handlers run on a session's worker thread and may block. Those that can run long
(``run_command``, ``search_files``, ``list_files`` globs) schedule their time limit with
``ctx.call_later`` and stop at once on ``ctx.cancel``; none reads a clock. The file tools
run in the daemon's own process: they open every path relative to the project's fd
(:mod:`corvid_actors.tools.safe_open`), never block on a FIFO or device, and work on the
file they judged. ``run_command`` runs its shell
in the OS sandbox given as ``ctx.sandbox`` (``corvid_actors.tools.sandbox``; its mode
decides what happens when none can run); ``search_files`` matches with RE2, in linear time.
"""

from __future__ import annotations

import errno
import functools
import io
import os
import stat
from typing import Any

from corvid_actors.core.vocabulary import ToolKind, ToolResult, ToolSpec
from corvid_actors.tools.base import Tool, ToolContext
from corvid_actors.tools.coding_base import (
    DEFAULT_SETTINGS,
    EDIT_FLAGS,
    WRITE_FLAGS,
    CodingToolSettings,
    closing_fd,
    error_result,
    guarded,
    not_regular,
    number_arg,
    output_result,
    read_all,
    refusal,
    required_arg,
    write_all,
)
from corvid_actors.tools.corvid_tools import describe_send_message
from corvid_actors.tools.file_search import list_files, search_files
from corvid_actors.tools.paths import project_parts
from corvid_actors.tools.run_command import run_command
from corvid_actors.tools.safe_open import READ_FLAGS, ProjectTree

# --- file tools -------------------------------------------------------------------------
# Each opens its path once, relative to the project's fd (safe_open), and works on that
# fd: what was judged (confinement, protection, type) is what is read or written.

CRLF = "\r\n"


def _read_file(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = required_arg(args, "path")
    offset = int(number_arg(args, "offset", integer=True) or 1)
    limit = number_arg(args, "limit", integer=True)
    parts = project_parts(ctx.project_dir, raw)
    check = refusal(ctx, f"Cannot read protected file: {raw}")
    check(parts)  # the name as written; tree.open judges the name it resolves to
    with ProjectTree(ctx.project_dir) as tree:
        try:
            fd = tree.open(parts, READ_FLAGS, check=check, shown=raw).fd
        except FileNotFoundError:
            return error_result(f"File not found: {raw}")
    with closing_fd(fd):
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            return error_result(f"{raw} is a directory: use list_files to see its contents")
        if not stat.S_ISREG(info.st_mode):
            return not_regular(raw, info.st_mode, "read_file")
        if limit is None and info.st_size > settings.read_max_file_bytes:
            return error_result(f"{raw} is {info.st_size} bytes: read it in parts with offset and limit")
        if b"\0" in os.pread(fd, settings.binary_sniff_bytes, 0):
            return error_result(f"{raw} is a binary file")
        raw_file = io.BufferedReader(io.FileIO(fd, "rb", closefd=False))
        with io.TextIOWrapper(raw_file, encoding="utf-8", errors="replace", newline="") as handle:
            return _numbered_lines(handle, raw, offset, limit, settings)


def _numbered_lines(handle: io.TextIOWrapper, raw: str, offset: int, limit: float | None,
                    settings: CodingToolSettings) -> ToolResult:
    last = None if limit is None else offset + int(limit) - 1
    lines, total = [], 0
    for number, line in enumerate(handle, start=1):
        total = number
        if number >= offset and (last is None or number <= last):
            lines.append(f"{number}\t{line.rstrip(CRLF)}")
        elif last is not None and number > last:
            break
    if total == 0:
        return ToolResult(f"(empty file: {raw})")
    if not lines:
        return error_result(f"Invalid 'offset': {offset} is past the end of {raw} ({total} lines)")
    return output_result("\n".join(lines), settings)


def _write_file(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = required_arg(args, "path")
    content = required_arg(args, "content", empty_ok=True)
    parts = project_parts(ctx.project_dir, raw)
    check = refusal(ctx, f"Cannot modify protected file: {raw}")
    check(parts)  # the name as written; tree.open judges the name it resolves to
    existed = False
    with ProjectTree(ctx.project_dir) as tree:
        try:
            try:
                fd = tree.open(parts, WRITE_FLAGS | os.O_CREAT | os.O_EXCL, check=check,
                               create_dirs=True, shown=raw).fd
            except FileExistsError:  # or a symlink by that name: followed if it stays inside
                existed = True
                fd = tree.open(parts, WRITE_FLAGS | os.O_CREAT, check=check, create_dirs=True,
                               shown=raw).fd
        except IsADirectoryError:
            return error_result(f"{raw} is a directory: give a file path")
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO no one reads
                return error_result(f"{raw} is not a regular file (FIFO): write_file writes "
                                    "regular files only")
            raise
    with closing_fd(fd):
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return not_regular(raw, info.st_mode, "write_file")
        os.ftruncate(fd, 0)
        write_all(fd, content.encode("utf-8"))
    verb = "Overwrote" if existed else "Created"
    return ToolResult(f"{verb} {raw} ({len(content)} chars)")


def _edit_file(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = required_arg(args, "path")
    old = required_arg(args, "old_string")
    new = required_arg(args, "new_string", empty_ok=True)
    parts = project_parts(ctx.project_dir, raw)
    check = refusal(ctx, f"Cannot modify protected file: {raw}")
    check(parts)  # the name as written; tree.open judges the name it resolves to
    if old == new:
        return error_result("old_string and new_string are identical: nothing to change")
    with ProjectTree(ctx.project_dir) as tree:
        try:
            fd = tree.open(parts, EDIT_FLAGS, check=check, shown=raw).fd
        except (FileNotFoundError, IsADirectoryError):
            return error_result(f"File not found: {raw}")
    with closing_fd(fd):
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return not_regular(raw, info.st_mode, "edit_file")
        try:
            text = read_all(fd).decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            return error_result(f"{raw} is not UTF-8 text: edit_file only edits text files")
        count = text.count(old)
        if count == 0:
            return error_result(f"old_string not found in {raw}: read the file first and copy the exact text")
        if count > 1:
            return error_result(
                f"old_string occurs {count} times in {raw}: include more context to make it unique"
            )
        data = text.replace(old, new, 1).encode("utf-8")
        os.lseek(fd, 0, os.SEEK_SET)
        write_all(fd, data)
        os.ftruncate(fd, len(data))
    return ToolResult(f"Edited {raw}")


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
    "list_files": list_files, "search_files": search_files, "run_command": run_command,
}

#: the names of the six coding tools
CODING_TOOL_NAMES: tuple[str, ...] = tuple(_SPECS)


def coding_tools(settings: CodingToolSettings = DEFAULT_SETTINGS) -> list[Tool]:
    """The six coding tools, bound to ``settings``."""
    tools = []
    for name, (kind, description, parameters) in _SPECS.items():
        bound = guarded(functools.partial(_HANDLERS[name], settings))
        tools.append(Tool(ToolSpec(name, description, parameters), kind, bound))
    return tools


def describe_tool_call(
    name: str, args: dict[str, Any], settings: CodingToolSettings = DEFAULT_SETTINGS
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
        return describe_send_message(args)
    return f"Use tool: {name}"
