"""The scan's identities, the judgement of new protected files (by table) and birth stamps
(on the real file system): ``corvid_actors.tools.sandbox._scan`` and ``._birth``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from corvid_actors.tools.sandbox import SandboxSettings, scan_project
from corvid_actors.tools.sandbox._birth import born_after, creation_stamp
from corvid_actors.tools.sandbox._scan import ProjectScan, escaped, new_protected_files

A, B, C = (1, 10), (1, 11), (1, 12)


def scan(files: dict[str, tuple[int, int]], stamp=(1, 100)) -> ProjectScan:
    return ProjectScan("/p", tuple(files), (), (), dict(files), stamp)


@pytest.mark.parametrize(("before", "after", "new", "expected_remove", "expected_keep"), [
    # a directory renamed: the same inode at a new path is never touched
    ({"/p/sub/.env": A}, {"/p/sub2/.env": A}, set(), (), ()),
    # moved back after a previous command: still the same inode
    ({"/p/sub/.env": A}, {"/p/sub/.env": A, "/p/x.key": B}, {"/p/x.key"}, ("/p/x.key",), ()),
    # an old inode that now has a protected name (renamed notes.txt): kept and reported
    ({}, {"/p/.env.x": C}, set(), (), ("/p/.env.x",)),
    # inode numbers reused by a new file: its birth says new, whatever the number
    ({"/p/.env": A}, {"/p/.env": A, "/p/.env.y": B}, {"/p/.env.y"}, ("/p/.env.y",), ()),
])
def test_only_a_provably_new_inode_is_removed(before, after, new, expected_remove, expected_keep):
    judged = new_protected_files(scan(before), scan(after), lambda path, _stamp: path in new)
    assert judged.remove == expected_remove
    assert judged.keep == expected_keep


def test_what_the_scan_after_does_not_find_has_escaped():
    before = scan({"/p/sub/.env": A, "/p/lib/.git": B})
    assert escaped(before, scan({"/p/sub/.env": A})) == {B: "/p/lib/.git"}
    assert escaped(before, None) == {A: "/p/sub/.env", B: "/p/lib/.git"}


def test_the_scan_records_identities_and_masks_the_restored_directory(tmp_path: Path):
    (tmp_path / ".env").write_text("x")
    (tmp_path / "lib" / ".git").mkdir(parents=True)
    (tmp_path / ".corvid-restored").mkdir()
    found = scan_project(str(tmp_path), (".env*",), SandboxSettings())
    assert found.masked_dirs == (str(tmp_path / ".corvid-restored"),)
    st = os.lstat(tmp_path / "lib" / ".git")
    assert found.identities[str(tmp_path / "lib" / ".git")] == (st.st_dev, st.st_ino)
    assert str(tmp_path / ".env") in found.identities


def test_birth_times_prove_new_files_only(tmp_path: Path):
    old = tmp_path / "old"
    old.write_text("x")
    stamp = creation_stamp(str(tmp_path))
    assert stamp is not None, "this machine's file system keeps birth times (ext4, tmpfs)"
    os.rename(old, tmp_path / "renamed")
    assert not born_after(str(tmp_path / "renamed"), stamp)
    # a file made after the stamp (a later clock tick than the stamp's) is new
    later = None
    for attempt in range(200):  # at most ~1 s: a coarse clock tick is a few ms
        time.sleep(0.005)
        path = tmp_path / f"new{attempt}"
        path.write_text("y")
        if born_after(str(path), stamp):
            later = path
            break
    assert later is not None
    assert not born_after(str(tmp_path / "missing"), stamp)
    assert not born_after(str(later), None)  # no stamp: nothing is ever proven new
