"""list_files and search_files: directory listings and globs, and a bounded RE2 search of
the project's files (see :mod:`.coding` for the rules every coding tool follows).

Both walk the project through directory fds (:meth:`ProjectTree.walk`): no symlink is
followed, special files are never opened to be read, and a walk stops at its entry cap,
its deadline (``ctx.call_later``) or the session's cancel, checked at every entry and, in
search_files, at every line of a file."""

from __future__ import annotations

import fnmatch
import io
import itertools
import os
import re
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corvid_actors.core.vocabulary import ToolResult
from corvid_actors.tools.base import ToolContext, ToolError
from corvid_actors.tools.coding_base import (
    CodingToolSettings,
    closing_fd,
    error_result,
    output_result,
    protected_patterns_of,
    required_arg,
    text_arg,
)
from corvid_actors.tools.glob_match import GlobPattern
from corvid_actors.tools.paths import CompiledPatterns, compile_patterns, project_parts
from corvid_actors.tools.safe_open import (
    LIST_FLAGS,
    PATH_FLAGS,
    READ_FLAGS,
    Entry,
    ProjectTree,
    WalkStopped,
    special_kind,
)
from corvid_actors.tools.shell_guard import (
    expand_braces,
)


def _capped(lines: list[str], total: int, limit: int, what: str) -> str:
    more = f"\n... ({total - limit} more {what} not shown: narrow the path)" if total > limit else ""
    return "\n".join(lines[:limit]) + more


def _stoppable(ctx: ToolContext, timeout_s: float) -> tuple[threading.Event, Callable[[], None]]:
    """An event set at the tool's deadline (through ``ctx.call_later``) and its canceller."""
    stop = threading.Event()
    return stop, ctx.call_later(timeout_s, stop.set)


# --- list_files -------------------------------------------------------------------------


def list_files(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raw = text_arg(args, "path") or "."
    if re.search(r"[*?{\[]", raw):
        return _list_glob(settings, raw, ctx)
    parts = project_parts(ctx.project_dir, raw)
    with ProjectTree(ctx.project_dir) as tree:
        try:
            opened = tree.open(parts, PATH_FLAGS, shown=raw)
        except FileNotFoundError:
            return error_result(f"Not found: {raw}")
    with closing_fd(opened.fd):
        info = os.fstat(opened.fd)
        if not stat.S_ISDIR(info.st_mode):
            return ToolResult(f"{opened.relative}  ({info.st_size} bytes)")
        with closing_fd(os.open(".", LIST_FLAGS, dir_fd=opened.fd)) as dir_fd:
            return _list_directory(settings, raw, dir_fd)


def _list_directory(settings: CodingToolSettings, raw: str, dir_fd: int) -> ToolResult:
    with os.scandir(dir_fd) as listing:
        entries = sorted(itertools.islice(listing, settings.list_walk_max_entries),
                         key=lambda e: e.name)
    if not entries:
        return ToolResult(f"(empty directory: {raw})")
    lines = [_describe_entry(entry, dir_fd) for entry in entries[: settings.list_max_entries]]
    text = _capped(lines, len(entries), settings.list_max_entries, "entries")
    if len(entries) >= settings.list_walk_max_entries:
        text += f"\n(stopped counting after {settings.list_walk_max_entries} entries)"
    return output_result(text, settings)


def _describe_entry(entry: os.DirEntry[str], dir_fd: int) -> str:
    try:
        if entry.is_symlink():
            return f"{entry.name} -> {os.readlink(entry.name, dir_fd=dir_fd)}"
        if entry.is_dir(follow_symlinks=False):
            return f"{entry.name}/"
        return f"{entry.name}  ({entry.stat(follow_symlinks=False).st_size} bytes)"
    except OSError:
        return f"{entry.name}  (gone)"


def _list_glob(settings: CodingToolSettings, raw: str, ctx: ToolContext) -> ToolResult:
    if os.path.isabs(raw) or ".." in re.split(r"[\\/]", raw) or raw.startswith("~"):
        return error_result(f"Invalid 'path': the glob {raw} must stay inside the project")
    patterns = [GlobPattern.parse(p)
                for p in expand_braces(raw, settings.guard.brace_max_expansions)]
    found: set[str] = set()
    stopped: WalkStopped | None = None
    stop, cancel_timer = _stoppable(ctx, settings.list_timeout_s)
    try:
        with ProjectTree(ctx.project_dir) as tree, \
                closing_fd(tree.open((), PATH_FLAGS).fd) as root_fd:
            walk = tree.walk(root_fd, "", max_entries=settings.list_walk_max_entries,
                             descend=lambda rel: any(p.may_descend(rel) for p in patterns),
                             should_stop=lambda: stop.is_set() or ctx.cancel.cancelled)
            try:
                for entry in walk:
                    if any(p.matches(entry.relative) for p in patterns) and _listable(tree, entry):
                        found.add(entry.relative)
            except WalkStopped as exc:
                stopped = exc
    finally:
        cancel_timer()
    if ctx.cancel.cancelled:
        return error_result(f"list_files cancelled: {raw}")
    lines = sorted(found)
    text = _capped(lines, len(lines), settings.list_max_entries, "files") if lines \
        else f"No files match {raw}"
    if stopped is not None and stop.is_set():
        text += f"\n(stopped looking after {settings.list_timeout_s:g} s: narrow the pattern)"
    elif stopped is not None:
        text += f"\n(stopped looking after visiting {stopped.visited} entries: narrow the pattern)"
    return output_result(text, settings)


def _listable(tree: ProjectTree, entry: Entry) -> bool:
    """Whether a match is listed: a symlink only when its target lies in the project."""
    if entry.kind != "symlink":
        return True
    try:
        target = os.readlink(entry.name, dir_fd=entry.dir_fd)
    except OSError:
        return False
    return tree.link_stays_inside(os.path.dirname(entry.relative), target)


# --- search_files -----------------------------------------------------------------------


@dataclass
class _Search:
    """One search_files call: what it looks for, and what it found and skipped."""

    settings: CodingToolSettings
    regex: Any
    file_glob: str | None
    protected: CompiledPatterns
    should_stop: Callable[[], bool]
    hits: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    walk_stopped: WalkStopped | None = None

    def full(self) -> bool:
        return len(self.hits) > self.settings.search_max_lines

    def wanted(self, relative: str) -> bool:
        if self.file_glob and not fnmatch.fnmatch(
                relative if "/" in self.file_glob else relative.rsplit("/", 1)[-1], self.file_glob):
            return False
        return not self.protected.matches(relative.split("/"))

    def search_fd(self, fd: int, relative: str) -> None:
        """grep one open file (regular, not too big, not binary), stopping mid-file when told."""
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            self.skipped.append(f"{relative} ({special_kind(info.st_mode)})")
            return
        if (info.st_size > self.settings.search_max_file_bytes
                or b"\0" in os.pread(fd, self.settings.binary_sniff_bytes, 0)):
            return  # huge or binary: grep -I skips binaries too
        raw_file = io.BufferedReader(io.FileIO(fd, "rb", closefd=False))
        with io.TextIOWrapper(raw_file, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                if self.should_stop():
                    return
                if self.regex.search(line):
                    text = line.rstrip("\r\n")[: self.settings.search_line_max_chars]
                    self.hits.append(f"{relative}:{number}:{text}")
                    if self.full():
                        return

    def search_entry(self, entry: Entry) -> None:
        if entry.kind in ("dir", "symlink") or not self.wanted(entry.relative):
            return  # symlinks are not followed: their targets are searched under their own names
        try:
            if entry.kind == "special":
                mode = os.stat(entry.name, dir_fd=entry.dir_fd, follow_symlinks=False).st_mode
                self.skipped.append(f"{entry.relative} ({special_kind(mode)})")
                return
            fd = os.open(entry.name, READ_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=entry.dir_fd)
        except OSError:
            return  # gone, swapped for a symlink, unreadable
        with closing_fd(fd):
            self.search_fd(fd, entry.relative)


def _search_tree(search: _Search, ctx: ToolContext, raw: str) -> None:
    """grep -rnI in Python over fds: protected files, special files and symlinks skipped."""
    parts = project_parts(ctx.project_dir, raw)
    skip_dirs = search.settings.search_skip_dirs
    with ProjectTree(ctx.project_dir) as tree:
        opened = tree.open(parts, READ_FLAGS, shown=raw)
        with closing_fd(opened.fd):
            if not stat.S_ISDIR(os.fstat(opened.fd).st_mode):
                if opened.parts and search.wanted(opened.relative):
                    search.search_fd(opened.fd, opened.relative)
                return
            walk = tree.walk(
                opened.fd, opened.relative, max_entries=search.settings.search_walk_max_entries,
                descend=lambda rel: (rel.rsplit("/", 1)[-1] not in skip_dirs
                                     and not search.protected.matches(rel.split("/"))),
                should_stop=lambda: search.should_stop() or search.full())
            try:
                for entry in walk:
                    search.search_entry(entry)
            except WalkStopped as exc:
                search.walk_stopped = exc


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
    stop, cancel_timer = _stoppable(ctx, settings.search_timeout_s)
    search = _Search(settings, regex, file_glob, compile_patterns(protected_patterns_of(ctx)),
                     lambda: stop.is_set() or ctx.cancel.cancelled)
    try:
        _search_tree(search, ctx, raw)
    except FileNotFoundError:
        return error_result(f"Not found: {raw}")
    finally:
        cancel_timer()
    if ctx.cancel.cancelled:
        return error_result(f"search_files cancelled: {pattern}")
    return output_result(_search_report(search, pattern, stop.is_set()), settings)


def _search_report(search: _Search, pattern: str, timed_out: bool) -> str:
    settings, hits = search.settings, search.hits
    if not hits:
        text = f"No matches for {pattern}"
    else:
        text = "\n".join(hits[: settings.search_max_lines])
        if len(hits) > settings.search_max_lines:
            text += f"\n... (more than {settings.search_max_lines} matching lines: narrow the search)"
    if search.skipped:
        shown = search.skipped[: settings.search_skipped_shown]
        more = f" and {len(search.skipped) - len(shown)} more" if len(search.skipped) > len(shown) else ""
        noun = "special file" if len(search.skipped) == 1 else "special files"
        text += f"\n(skipped {len(search.skipped)} {noun}, not regular: {', '.join(shown)}{more})"
    if timed_out:
        text += f"\n(search stopped after {settings.search_timeout_s:g} s: narrow path or glob)"
    elif search.walk_stopped is not None and not search.full():
        text += (f"\n(search stopped after visiting {search.walk_stopped.visited} entries: "
                 "narrow path or glob)")
    return text


# --- run_command ------------------------------------------------------------------------
