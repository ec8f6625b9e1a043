"""list_files and search_files: directory listings and globs, and a bounded RE2 search of
the project's files (see :mod:`.coding` for the rules every coding tool follows)."""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from corvid_actors.tools.base import ToolContext, ToolError
from corvid_actors.tools.coding_base import (
    CodingToolSettings,
    error_result,
    is_binary,
    output_result,
    protected_patterns_of,
    required_arg,
    text_arg,
)
from corvid_actors.tools.paths import (
    is_protected,
    is_within,
    relative_to_project,
    resolve_in_project,
)
from corvid_actors.tools.shell_guard import (
    expand_braces,
)
from corvid_actors.vocabulary import ToolResult


def _capped(lines: list[str], total: int, limit: int, what: str) -> str:
    more = f"\n... ({total - limit} more {what} not shown: narrow the path)" if total > limit else ""
    return "\n".join(lines[:limit]) + more


def _list_glob(settings: CodingToolSettings, raw: str, ctx: ToolContext) -> ToolResult:
    if os.path.isabs(raw) or ".." in re.split(r"[\\/]", raw) or raw.startswith("~"):
        return error_result(f"Invalid 'path': the glob {raw} must stay inside the project")
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
    return output_result(text, settings)


def list_files(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = text_arg(args, "path") or "."
    if re.search(r"[*?{\[]", raw):
        return _list_glob(settings, raw, ctx)
    path = resolve_in_project(ctx.project_dir, raw)
    if not path.exists():
        return error_result(f"Not found: {raw}")
    if not path.is_dir():
        return ToolResult(f"{relative_to_project(ctx.project_dir, path)}  ({path.stat().st_size} bytes)")
    entries = sorted(os.scandir(path), key=lambda e: e.name)
    if not entries:
        return ToolResult(f"(empty directory: {raw})")
    lines = [_describe_entry(entry) for entry in entries[: settings.list_max_entries]]
    return output_result(_capped(lines, len(entries), settings.list_max_entries, "entries"), settings)


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
    root, patterns = os.path.realpath(ctx.project_dir), protected_patterns_of(ctx)
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
                or is_binary(real, settings.binary_sniff_bytes)):
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
        import re2
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


def search_files(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    pattern = required_arg(args, "pattern")
    raw = text_arg(args, "path") or "."
    file_glob = text_arg(args, "glob")
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
    return output_result(text, settings)


# --- run_command ------------------------------------------------------------------------
