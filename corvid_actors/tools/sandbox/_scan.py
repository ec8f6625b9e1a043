"""The walk of a project for what the sandbox masks: protected files and directories, ``.git``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from corvid_actors.tools.paths import (
    TreeTooLarge,
    compile_patterns,
    is_within,
    protected_match,
    walk_tree,
)
from corvid_actors.tools.sandbox._probe import SandboxSettings, SandboxUnavailable


@dataclass(frozen=True)
class ProjectScan:
    """What the launcher found in the project before a command: what to mask."""

    root: str
    masked_files: tuple[str, ...]
    masked_dirs: tuple[str, ...]
    git_dirs: tuple[str, ...]


def scan_project(root: str, patterns: Sequence[str], settings: SandboxSettings) -> ProjectScan:
    """The protected files and directories and the ``.git`` entries of the project.

    Raises :class:`SandboxUnavailable` when the tree is too big to be checked.
    """
    compiled = compile_patterns(tuple(patterns))
    files: list[str] = []
    dirs: list[str] = []
    gits: list[str] = []
    masked: set[str] = set()

    def descend(entry: os.DirEntry[str]) -> bool:
        return entry.name != ".git" and entry.name not in settings.mask_skip_dirs and entry.path not in masked

    try:
        for entry in walk_tree(root, settings.mask_walk_max_entries, descend):
            if entry.name == ".git":
                gits.append(entry.path)
            elif compiled.name_matches(entry.name) or (
                    compiled.anchored and protected_match(root, entry.path, patterns)):
                masked.add(entry.path)
                _mask(entry, root, files, dirs)
    except TreeTooLarge:
        raise SandboxUnavailable(
            f"the project has more than {settings.mask_walk_max_entries} entries: its "
            "protected files cannot all be masked (raise [tools.sandbox] "
            "mask_walk_max_entries or add large directories to mask_skip_dirs)") from None
    return ProjectScan(root, tuple(files), tuple(dirs), tuple(gits))


def _mask(entry: os.DirEntry[str], root: str, files: list[str], dirs: list[str]) -> None:
    if entry.is_symlink():
        # a protected name pointing into the project: mask what it points at too
        target = os.path.realpath(entry.path)
        if is_within(target, root) and target != root:
            (dirs if os.path.isdir(target) else files).append(target)
        return  # a mount on a symlink would land on its target anyway
    (dirs if entry.is_dir(follow_symlinks=False) else files).append(entry.path)


def new_protected_files(before: ProjectScan, after: ProjectScan) -> list[str]:
    """Protected files (not directories) present after a command that were not before."""
    known = set(before.masked_files) | set(before.masked_dirs)
    return sorted(p for p in after.masked_files if p not in known
                  and not any(is_within(p, d) for d in before.masked_dirs))
