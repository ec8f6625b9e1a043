"""Path safety for the coding tools: confinement to the project and protected paths.

Two rules, both pure functions (of the path's text, and for protection of the file system
as it is now):

* :func:`project_parts` turns a tool's ``path`` argument into components relative to the
  project directory, or raises :class:`PathDenied` (absolute paths elsewhere, ``..``
  escapes, ``~``); the file tools then open those components relative to the project's
  fd (:mod:`corvid_actors.tools.safe_open`), which refuses symlinks that lead out.
* :func:`is_protected` says whether a path is protected (secrets, the database, key
  stores, ``.git/``). Protection is checked before any permission mode, so even a
  ``full-auto`` agent cannot write these paths (SDK-process seed, invariant 1).

Pattern language (configurable, see :data:`DEFAULT_PROTECTED_PATTERNS`), matched
case-insensitively because a case-insensitive file system makes ``.ENV`` the same file:

* a pattern without ``/`` (``.env*``, ``*.pem``) or ending with a single ``/`` (``.git/``)
  matches ANY component of the path, so it covers the file itself, a directory of that
  name, and everything under it (``foo/.env``, ``.git/config``);
* a pattern with an inner ``/`` (``server/selftest/``, ``config/secrets.toml``) is anchored
  at the project root and matches that path and everything under it.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from corvid_actors.tools.base import PathDenied

#: Paths no tool may write (nor, through the shell guard, even mention). ``.env*``
#: covers ``.env``, ``.env.local``, ``.envrc``; the database patterns cover SQLite's
#: WAL/SHM/journal side files, which are the database too.
DEFAULT_PROTECTED_PATTERNS: tuple[str, ...] = (
    # environment files (secrets)
    ".env*",
    "*.env",
    "*.envrc",
    # version control internals
    ".git/",
    # the database file and its side files
    "*.db",
    "*.db-wal",
    "*.db-shm",
    "*.db-journal",
    "*.sqlite*",
    # key stores and private keys
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*keystore*",
    ".ssh/",
    ".gnupg/",
)


@dataclass(frozen=True)
class CompiledPatterns:
    """Protected patterns compiled once: one regex for components, anchored ones apart.

    Built by :func:`compile_patterns`; used directly when walking a tree (the shell guard).
    """

    component: re.Pattern[str] | None
    anchored: tuple[str, ...]

    def matches(self, parts: list[str]) -> bool:
        lowered = [part.lower() for part in parts]
        if self.component is not None and any(self.component.match(p) for p in lowered):
            return True
        for depth in range(1, len(lowered) + 1):
            prefix = "/".join(lowered[:depth])
            if any(fnmatch.fnmatchcase(prefix, pattern) for pattern in self.anchored):
                return True
        return False

    def name_matches(self, name: str) -> bool:
        """Whether one path component alone is protected (used when walking a tree)."""
        return self.component is not None and self.component.match(name.lower()) is not None


@lru_cache(maxsize=32)
def compile_patterns(patterns: tuple[str, ...]) -> CompiledPatterns:
    """Compile protected patterns (cached: the same tuple is used for every tool call)."""
    component: list[str] = []
    anchored: list[str] = []
    for raw in patterns:
        body = raw.strip().lower().rstrip("/")
        if not body:
            continue
        if "/" in body:
            anchored.append(body.lstrip("/"))
        else:
            component.append(fnmatch.translate(body))
    regex = re.compile("|".join(component)) if component else None
    return CompiledPatterns(regex, tuple(anchored))


def _real_root(project_dir: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(project_dir))


def is_within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both absolute and normalised)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _parts(path: str, root: str) -> list[str]:
    """Components relative to the project when inside it, else of the absolute path."""
    if is_within(path, root):
        # slicing, not os.path.relpath: this runs for every word of every command
        relative = path[len(root):].lstrip(os.sep)
        return relative.split(os.sep) if relative else []
    return [part for part in path.split(os.sep) if part]


def is_protected(
    project_dir: str | os.PathLike[str],
    path: str | os.PathLike[str],
    patterns: Iterable[str] = DEFAULT_PROTECTED_PATTERNS,
) -> bool:
    """Whether ``path`` (relative to ``project_dir``, or absolute) is a protected path.

    Both the path as written (normalised) and its realpath are checked, so a symlink
    pointing at a protected file is protected too, and so is a path through a symlinked
    directory. A path that does not exist yet is judged by its name.
    """
    return protected_match(project_dir, path, patterns) is not None


def protected_match(
    project_dir: str | os.PathLike[str],
    path: str | os.PathLike[str],
    patterns: Iterable[str] = DEFAULT_PROTECTED_PATTERNS,
) -> str | None:
    """Like :func:`is_protected`, returning the resolved path that matched (or None)."""
    text = os.fspath(path)
    if not text or "\0" in text:
        return None
    compiled = compile_patterns(tuple(patterns))
    root = _real_root(project_dir)
    joined = os.path.join(root, text)
    candidates = [os.path.normpath(joined), os.path.realpath(joined)]
    if text.startswith("~"):
        # a shell expands ~; judge the home path too (the file tools deny ~ outright)
        candidates.append(os.path.realpath(os.path.expanduser(text)))
    for candidate in candidates:
        if compiled.matches(_parts(candidate, root)):
            return candidate
    return None


def project_parts(project_dir: str | os.PathLike[str], path: str | os.PathLike[str]) -> tuple[str, ...]:
    """``path`` as normalised components relative to ``project_dir`` (``()``: the project),
    or :class:`PathDenied` — judged by its text alone, the file system untouched.

    Relative paths are taken from the project directory. An absolute path is accepted
    only when it lies inside the project, under either spelling of its root (the model
    often echoes absolute paths back; the project may be named through a symlink, e.g.
    /tmp -> /private/tmp). ``..`` that leaves the project is denied, and ``~`` rather than
    creating a directory named ``~``. Symlinks are the business of whoever opens the path
    (:class:`corvid_actors.tools.safe_open.ProjectTree`), at the moment it opens it: a
    path resolved here and opened later would lose to a directory swapped for a symlink.
    """
    text = os.fspath(path)
    if not text:
        raise PathDenied("Path is empty: give a path relative to the project directory")
    if "\0" in text:
        raise PathDenied(f"Path contains a NUL byte: {text!r}")
    if text.startswith("~"):
        raise PathDenied(
            f"Home-relative paths are not allowed: {text} (use a path inside the project)"
        )
    root = _real_root(project_dir)
    joined = os.path.normpath(os.path.join(root, text))
    for spelling in (root, os.path.normpath(os.path.abspath(os.fspath(project_dir)))):
        if is_within(joined, spelling):
            relative = joined[len(spelling):].lstrip(os.sep)
            return tuple(relative.split(os.sep)) if relative else ()
    if os.path.isabs(text):
        raise PathDenied(f"Path outside the project directory denied: {text}")
    raise PathDenied(f"Path traversal denied: {text} leaves the project directory")


class TreeTooLarge(Exception):
    """:func:`walk_tree` met more entries than it may look at."""


def walk_tree(start: str, max_entries: int,
              descend: Callable[[os.DirEntry[str]], bool]) -> Iterator[os.DirEntry[str]]:
    """Every entry below ``start``, depth first, symlinks never followed; a directory is
    entered only when ``descend(entry)`` says so (asked after the caller has seen the entry).
    Raises :class:`TreeTooLarge` past ``max_entries``: a walk of a project is always bounded.
    Unreadable directories are passed over."""
    visited, stack = 0, [start]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            visited += 1
            if visited > max_entries:
                raise TreeTooLarge(f"more than {max_entries} entries below {start}")
            yield entry
            if entry.is_dir(follow_symlinks=False) and descend(entry):
                stack.append(entry.path)
