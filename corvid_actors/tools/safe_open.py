"""Opening and walking paths inside the project without ever leaving it, race-free.

The file tools run in the daemon's own process, so what confines them is how they open
paths: a check on a path followed by ``open(path)`` loses to anything that swaps a
directory for a symlink in between (another session's command, an MCP server). Here every
path is opened relative to a file descriptor of the project directory, never by name:

* ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` (Linux ≥ 5.6)
  opens a path that holds no symlink in one call; the kernel refuses ``..`` above the
  project and every symlink, whenever they appear;
* otherwise (a symlink on the path, or openat2 missing: ENOSYS, or refused by a seccomp
  filter: EPERM) one component at a time with ``O_NOFOLLOW`` from the directory fd opened
  before it. A symlink met on the way is read (``readlinkat``) and its target resolved
  the same way, component by component, from the directory that holds it — so a symlink
  that stays inside the project is followed, and one that leads out is refused, as of the
  moment it is met, not as of an earlier check. ``..`` goes back to the directory fd the
  walk came from, never to the kernel's parent.

Either way the caller learns the name it actually opened (:attr:`Opened.parts`, symlinks
resolved) and may refuse it (``check``) before the last component is opened or any
directory created, so a protected-path rule judges the file that is used.

:class:`ProjectTree` holds the project's fd; :meth:`ProjectTree.walk` lists a tree below
it through directory fds, never following a symlink, bounded in entries and stoppable.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from corvid_actors.tools.base import PathDenied
from corvid_actors.tools.openat2 import openat2

#: symlinks followed while opening one path before giving up (the kernel's own limit)
MAX_SYMLINKS = 40
_CLOEXEC = os.O_CLOEXEC
_DIR_PATH = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC

#: the open flags of the tools: never block (a FIFO, a device), never a controlling tty
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
#: open to inspect only (type and size): touches no FIFO or device
PATH_FLAGS = os.O_PATH
#: open a directory (relative to an fd of it, or of its parent) to list it
LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC


@dataclass(frozen=True)
class Opened:
    """An open file descriptor (the caller closes it) and the name it was opened by,
    relative to the project, symlinks resolved (``()`` is the project itself)."""

    fd: int
    parts: tuple[str, ...]

    @property
    def relative(self) -> str:
        return "/".join(self.parts) or "."


Check = Callable[[tuple[str, ...]], None]


def _no_check(parts: tuple[str, ...]) -> None:
    return None


def _changing(name: str, dir_fd: int, last: bool) -> bool:
    """After an open refused ``name`` as a symlink that then could not be read as one: is
    it being swapped (worth another look), rather than plainly not a directory?"""
    if last:
        return True  # ELOOP at the end comes from a symlink only
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return False
    return stat.S_ISDIR(mode) or stat.S_ISLNK(mode)


def _read_link(name: str, dir_fd: int) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None  # not a symlink (or gone): the caller re-raises its own error


class ProjectTree:
    """The project directory held open; opens and walks paths strictly below it.

    Use as a context manager (the fd is closed at the end). ``use_openat2=False`` forces
    the component walk (tests; and what runs anyway where openat2 is missing).
    """

    def __init__(self, project_dir: str | os.PathLike[str], *, use_openat2: bool = True) -> None:
        self.spellings = (os.path.realpath(os.fspath(project_dir)),
                          os.path.normpath(os.path.abspath(os.fspath(project_dir))))
        self.use_openat2 = use_openat2
        self.fd = os.open(self.spellings[0], _DIR_PATH)

    def __enter__(self) -> ProjectTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # --- opening one path -----------------------------------------------------------

    def open(self, parts: tuple[str, ...], flags: int, mode: int = 0o666, *,
             check: Check = _no_check, create_dirs: bool = False, shown: str = "") -> Opened:
        """Open ``parts`` (normalised components relative to the project: no ``.``/``..``)
        with ``flags``; symlinks inside the project are followed, any other is refused
        (:class:`PathDenied`). ``check(resolved parts)`` runs before the last component is
        opened and before a missing directory is created (``create_dirs``); it raises to
        refuse. ``shown`` names the path in messages."""
        if self.use_openat2 and parts:
            check(parts)
            try:
                fd = openat2(self.fd, "/".join(parts), flags, mode)
            except OSError as exc:
                # a symlink on the path (ELOOP), a .. race (EXDEV, EAGAIN), a missing
                # parent to create: the walk resolves it, one component at a time
                resolvable = (errno.ELOOP, errno.EXDEV, errno.EAGAIN)
                if exc.errno not in resolvable and not (create_dirs and exc.errno == errno.ENOENT):
                    raise
                fd = None
            if fd is not None:
                return Opened(fd, parts)
        return self._walk_open(parts, flags, mode, check, create_dirs, shown or "/".join(parts))

    def _walk_open(self, parts: tuple[str, ...], flags: int, mode: int, check: Check,
                   create_dirs: bool, shown: str) -> Opened:
        pending = list(reversed(parts))
        fds: list[int] = []  # the directories entered, below the project's own fd
        names: list[str] = []
        links = 0
        try:
            while True:
                here = fds[-1] if fds else self.fd
                if not pending:  # the path names a directory already entered (or the root)
                    check(tuple(names))
                    return Opened(os.open(".", flags | _CLOEXEC, mode, dir_fd=here),
                                  tuple(names))
                name = pending.pop()
                if name in ("", "."):
                    continue
                if name == "..":
                    if not names:
                        raise PathDenied(f"Symlink escape denied: {shown} leads outside the "
                                         "project" if links else
                                         f"Path traversal denied: {shown} leaves the project")
                    names.pop()
                    os.close(fds.pop())
                    continue
                last = not any(p not in ("", ".") for p in pending)
                try:
                    if last:
                        check((*names, name))
                        fd = os.open(name, flags | os.O_NOFOLLOW | _CLOEXEC, mode, dir_fd=here)
                        if stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH opens the link itself
                            os.close(fd)
                            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
                    else:
                        fd = os.open(name, _DIR_PATH, dir_fd=here)
                except OSError as exc:
                    target = (_read_link(name, here)
                              if exc.errno in (errno.ELOOP, errno.ENOTDIR) else None)
                    if target is None and exc.errno == (errno.ELOOP if last else errno.ENOTDIR) \
                            and _changing(name, here, last) and links < MAX_SYMLINKS:
                        links += 1  # a symlink swapped back meanwhile: look again (bounded)
                        pending.append(name)
                        continue
                    if target is not None:
                        links += 1
                        if links > MAX_SYMLINKS:
                            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), shown) from None
                        if os.path.isabs(target):
                            inside = self._inside(target)
                            if inside is None:
                                raise PathDenied(f"Symlink escape denied: {shown} leads "
                                                 "outside the project") from None
                            while fds:
                                os.close(fds.pop())
                            names.clear()
                            target = inside
                        pending.extend(reversed(target.split("/")))
                        continue
                    if exc.errno == errno.ENOENT and not last and create_dirs:
                        check((*names, name))
                        try:
                            os.mkdir(name, 0o777, dir_fd=here)
                        except FileExistsError:
                            pass  # made meanwhile: opened (and judged) as any directory
                        pending.append(name)
                        continue
                    raise
                if last:
                    return Opened(fd, (*names, name))
                fds.append(fd)
                names.append(name)
        finally:
            for fd in fds:
                os.close(fd)

    def _inside(self, absolute: str) -> str | None:
        """An absolute symlink target as a path relative to the project, or None outside."""
        target = os.path.normpath(absolute)
        for root in self.spellings:
            if target == root:
                return "."
            if target.startswith(root.rstrip("/") + "/"):
                return target[len(root.rstrip("/")) + 1:]
        return None

    def link_stays_inside(self, directory: str, target: str) -> bool:
        """Whether a symlink in ``directory`` (relative to the project) with ``target``
        points inside the project, judged by its text (for listings: nothing is opened)."""
        if os.path.isabs(target):
            return self._inside(target) is not None
        joined = os.path.normpath(os.path.join(directory, target))
        return joined != ".." and not joined.startswith("../")

    # --- walking a tree ---------------------------------------------------------------

    def walk(self, start_fd: int, start_rel: str, *, max_entries: int,
             descend: Callable[[str], bool], should_stop: Callable[[], bool]) -> Iterator[Entry]:
        """Every entry below the directory open as ``start_fd`` (from :meth:`open`; it stays
        the caller's) whose path from the project is ``start_rel``, depth first, names sorted in each directory. Directories are
        entered through fds with ``O_NOFOLLOW`` (a symlink is listed, never followed; one
        swapped in meanwhile is not entered) and only when ``descend(relative path)``
        says so; each (device, inode) is entered once. Stops (with :class:`WalkStopped`)
        past ``max_entries`` entries or when ``should_stop()``."""
        seen = {_identity(start_fd)}
        stack = [(os.open(".", LIST_FLAGS, dir_fd=start_fd), start_rel)]
        visited = 0
        try:
            while stack:
                dir_fd, rel = stack.pop()
                try:
                    entries = self._entries(dir_fd, max_entries - visited + 1)
                except OSError:
                    os.close(dir_fd)
                    continue  # unreadable: passed over
                children = []
                try:
                    for entry in entries:
                        if should_stop():
                            raise WalkStopped("stopped", visited)
                        visited += 1
                        if visited > max_entries:
                            raise WalkStopped("too many entries", max_entries)
                        child = entry.name if rel in ("", ".") else f"{rel}/{entry.name}"
                        item = Entry(child, entry.name, dir_fd, _kind(entry))
                        yield item
                        if item.kind == "dir" and descend(child):
                            children.append(child)
                    for child in reversed(children):
                        opened = self._enter(dir_fd, child.rsplit("/", 1)[-1], seen)
                        if opened is not None:
                            stack.append((opened, child))
                finally:
                    os.close(dir_fd)
        finally:
            for dir_fd, _rel in stack:
                os.close(dir_fd)

    @staticmethod
    def _entries(dir_fd: int, limit: int) -> list[os.DirEntry[str]]:
        entries = []
        with os.scandir(dir_fd) as listing:
            for entry in listing:
                entries.append(entry)
                if len(entries) >= limit:
                    break
        return sorted(entries, key=lambda e: e.name)

    @staticmethod
    def _enter(dir_fd: int, name: str, seen: set[tuple[int, int]]) -> int | None:
        try:
            fd = os.open(name, LIST_FLAGS, dir_fd=dir_fd)
        except OSError:
            return None  # gone, or swapped for a symlink since it was listed
        identity = _identity(fd)
        if identity in seen:  # a bind mount looping back
            os.close(fd)
            return None
        seen.add(identity)
        return fd


class WalkStopped(Exception):
    """:meth:`ProjectTree.walk` stopped early: ``reason`` and the entries visited."""

    def __init__(self, reason: str, visited: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.visited = visited


@dataclass(frozen=True)
class Entry:
    """One entry of a walk: its path relative to the project, its name, the fd of the
    directory holding it (valid until the walk moves on) and its kind, from the directory
    listing: "dir", "file", "symlink" or "special" (FIFO, socket, device)."""

    relative: str
    name: str
    dir_fd: int
    kind: str


def _kind(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            return "symlink"
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        if entry.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "special"


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def special_kind(mode: int) -> str:
    """What a file that is neither regular nor a directory is, for messages."""
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"
