"""After a sandboxed command: protected files it moved out of the scan's sight are put
back, protected files it made are removed, and what is kept is said (see the package
docstring for why)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from corvid_actors.tools.paths import TreeTooLarge, walk_tree
from corvid_actors.tools.sandbox._birth import born_after, creation_stamp
from corvid_actors.tools.sandbox._probe import SandboxSettings, SandboxUnavailable
from corvid_actors.tools.sandbox._scan import (
    RESTORED_DIR,
    FileId,
    ProjectScan,
    escaped,
    new_protected_files,
    scan_project,
)


@dataclass
class Settlement:
    """What the runtime did to the project after one command (paths relative to it)."""

    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    #: (where the command left it, where it is now)
    put_back: list[tuple[str, str]] = field(default_factory=list)
    #: protected paths of the scan before that are nowhere to be found (or could not move)
    lost: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        """One line per kind of action, for the tool's result (empty: nothing to say)."""
        lines = []
        if self.removed:
            lines.append("[sandbox] removed protected files the command created: "
                         + ", ".join(self.removed))
        if self.kept:
            lines.append("[sandbox] kept files that a protected name now names or points at (they existed "
                         "before the command, or cannot be proven new; masked from now on): "
                         + ", ".join(self.kept))
        if self.put_back:
            lines.append("[sandbox] moved protected files back where the mask scan sees them: "
                         + ", ".join(f"{a} -> {b}" for a, b in self.put_back))
        if self.lost:
            lines.append("[sandbox] WARNING: protected paths the command moved could not be "
                         "found or moved back (tell the operator): " + ", ".join(self.lost))
        return lines


def scan_before_command(root: str, patterns: Sequence[str], settings: SandboxSettings) -> ProjectScan:
    """:func:`scan_project` and the birth stamp, taken last: call just before the command."""
    scan = scan_project(root, patterns, settings)
    return replace(scan, stamp=creation_stamp(root))


def settle_after_command(before: ProjectScan, patterns: Sequence[str],
                         settings: SandboxSettings) -> Settlement:
    """Walk the project again after the command (its processes all ended) and settle it.

    Protected files the command made (a new inode, :mod:`._birth`) are removed; every
    other file is kept, whatever its name. What was masked or read-only before and is no
    longer where the scan looks (moved into ``mask_skip_dirs``, a new ``.git``, out of an
    anchored pattern) is found by its identity and moved back to its old path (or, when
    that cannot be done safely, into ``RESTORED_DIR``, masked as a whole): after every
    command, every protected file is again where the next scan masks it.
    """
    root = before.root
    try:
        after: ProjectScan | None = scan_project(root, patterns, settings)
    except SandboxUnavailable:
        after = None
    done = Settlement()
    if after is not None:
        judged = new_protected_files(before, after, born_after)
        for path in judged.remove:
            with contextlib.suppress(OSError):
                os.unlink(path)
                done.removed.append(os.path.relpath(path, root))
        done.kept = [os.path.relpath(p, root) for p in judged.keep]
    gone = escaped(before, after)
    if gone:
        found = _locate(root, gone, settings.moved_search_max_entries)
        for identity, old in sorted(gone.items(), key=lambda item: item[1]):
            now = found.get(identity)
            if now == old:
                continue
            dest = _put_back(root, now, old) if now is not None else None
            if dest is None:
                done.lost.append(os.path.relpath(old, root))
            else:
                done.put_back.append((os.path.relpath(now or old, root),
                                      os.path.relpath(dest, root)))
    return done


def _locate(root: str, wanted: dict[FileId, str], max_entries: int) -> dict[FileId, str]:
    """Where each identity now lies, walking everything (skipped directories and ``.git``
    too: names and inode numbers from the directory entries, one ``lstat`` per candidate)."""
    inodes = {ino for _dev, ino in wanted}
    found: dict[FileId, str] = {}
    try:
        for entry in walk_tree(root, max_entries, lambda _entry: True):
            if entry.inode() not in inodes:
                continue
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                identity = (st.st_dev, st.st_ino)
                if identity in wanted and identity not in found:
                    found[identity] = entry.path
                    if len(found) == len(wanted):
                        break
    except TreeTooLarge:
        pass  # what was not found is reported lost
    return found


def _real_dirs(root: str, path: str) -> None:
    """Make ``path`` (below ``root``) a chain of real directories: no component may be a
    symlink (the command could have planted one pointing out of the project). Made
    directories get the project root's owner. Raises OSError when that cannot be."""
    owner = os.lstat(root)
    current = root
    for part in os.path.relpath(path, root).split(os.sep):
        if part in ("", "."):
            continue
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            os.mkdir(current, 0o755)
            if os.geteuid() == 0:
                os.lchown(current, owner.st_uid, owner.st_gid)
            continue
        if not stat.S_ISDIR(mode):
            raise NotADirectoryError(current)


def _put_back(root: str, now: str, old: str) -> str | None:
    """Move ``now`` to ``old`` (never over anything); else into ``RESTORED_DIR``; the
    path it went to, or None."""
    relative = os.path.relpath(old, root)
    candidates = [old] + [os.path.join(root, RESTORED_DIR, str(n), relative) for n in range(1, 100)]
    for dest in candidates:
        try:
            _real_dirs(root, os.path.dirname(dest))
            if os.path.lexists(dest):
                continue
            os.rename(now, dest)
        except OSError:
            continue
        return dest
    return None
