"""The walk of a project for what the sandbox masks (protected files and directories,
``.git``), each with its identity, and the pure judgement of what changed after a command."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from corvid_actors.tools.paths import (
    TreeTooLarge,
    compile_patterns,
    is_within,
    protected_match,
    walk_tree,
)
from corvid_actors.tools.sandbox._birth import Stamp
from corvid_actors.tools.sandbox._probe import SandboxSettings, SandboxUnavailable

#: (st_dev, st_ino): a file's identity, whatever its path or name
FileId = tuple[int, int]

#: the directory at the project's root where protected files go when they cannot be put
#: back where they were (see ``_settle``): always masked as a whole, in every sandbox
RESTORED_DIR = ".corvid-restored"


@dataclass(frozen=True)
class ProjectScan:
    """What the launcher found in the project before a command: what to mask.

    ``identities`` maps every masked path and ``.git`` to its (device, inode) on the host;
    ``stamp`` (set by the launcher just before the command starts) tells new inodes from
    old ones (``_birth``).
    """

    root: str
    masked_files: tuple[str, ...]
    masked_dirs: tuple[str, ...]
    git_dirs: tuple[str, ...]
    identities: Mapping[str, FileId] = field(default_factory=dict)
    stamp: Stamp | None = None

    @property
    def known(self) -> set[FileId]:
        """The identities of everything masked or read-only in this scan."""
        return set(self.identities.values())


def scan_project(root: str, patterns: Sequence[str], settings: SandboxSettings) -> ProjectScan:
    """The protected files and directories and the ``.git`` entries of the project, with
    their identities. The walk does not enter ``mask_skip_dirs``, ``.git`` nor masked
    directories (what a command moves there is found after it: ``_settle``).

    Raises :class:`SandboxUnavailable` when the tree is too big to be checked.
    """
    compiled = compile_patterns(tuple(patterns))
    files: list[str] = []
    dirs: list[str] = []
    gits: list[str] = []
    masked: set[str] = set()
    restored = os.path.join(root, RESTORED_DIR)

    def descend(entry: os.DirEntry[str]) -> bool:
        return entry.name != ".git" and entry.name not in settings.mask_skip_dirs and entry.path not in masked

    try:
        for entry in walk_tree(root, settings.mask_walk_max_entries, descend):
            if entry.name == ".git":
                gits.append(entry.path)
            elif entry.path == restored or compiled.name_matches(entry.name) or (
                    compiled.anchored and protected_match(root, entry.path, patterns)):
                masked.add(entry.path)
                _mask(entry, root, files, dirs)
    except TreeTooLarge:
        raise SandboxUnavailable(
            f"the project has more than {settings.mask_walk_max_entries} entries: its "
            "protected files cannot all be masked (raise [tools.sandbox] "
            "mask_walk_max_entries or add large directories to mask_skip_dirs)") from None
    return ProjectScan(root, tuple(files), tuple(dirs), tuple(gits),
                       _identities([*files, *dirs, *gits]))


def _identities(paths: Sequence[str]) -> dict[str, FileId]:
    found: dict[str, FileId] = {}
    for path in paths:
        try:
            stat = os.lstat(path)
        except OSError:
            continue  # gone already: nothing to follow
        found[path] = (stat.st_dev, stat.st_ino)
    return found


def _mask(entry: os.DirEntry[str], root: str, files: list[str], dirs: list[str]) -> None:
    if entry.is_symlink():
        # a protected name pointing into the project: mask what it points at too
        target = os.path.realpath(entry.path)
        if is_within(target, root) and target != root:
            (dirs if os.path.isdir(target) else files).append(target)
        return  # a mount on a symlink would land on its target anyway
    (dirs if entry.is_dir(follow_symlinks=False) else files).append(entry.path)


@dataclass(frozen=True)
class NewFiles:
    """The judgement of the protected files a scan after a command found that the scan
    before did not: ``remove`` were provably made by the command (a new inode);
    ``keep`` existed before under another name or cannot be proven new."""

    remove: tuple[str, ...]
    keep: tuple[str, ...]


def new_protected_files(before: ProjectScan, after: ProjectScan,
                        born_after: Callable[[str, Stamp | None], bool]) -> NewFiles:
    """Protected files (not directories) after a command that were not protected before.

    A file whose identity was masked before moved (a directory renamed): never touched. A
    file is to be removed only when ``born_after(path, before.stamp)`` proves that its inode
    was made after the command started; anything else is kept (and reported by the caller):
    a file that existed before a command is never deleted, whatever its name or path now.
    """
    known = before.known
    remove: list[str] = []
    keep: list[str] = []
    for path in sorted(after.masked_files):
        identity = after.identities.get(path)
        if identity is None or identity in known:
            continue
        (remove if born_after(path, before.stamp) else keep).append(path)
    return NewFiles(tuple(remove), tuple(keep))


def escaped(before: ProjectScan, after: ProjectScan | None) -> dict[FileId, str]:
    """What was masked or read-only before a command and that the scan after it no longer
    finds: moved where the scan does not look (a skipped directory, a new ``.git``) or out
    of an anchored pattern's path. Identity → the path it had. All of it when there is no
    scan after (the tree grew too big to walk)."""
    left = after.known if after is not None else set()
    out: dict[FileId, str] = {}
    for path, identity in before.identities.items():
        if identity not in left:
            out.setdefault(identity, path)
    return out
