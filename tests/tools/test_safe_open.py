"""ProjectTree: opening paths relative to the project's fd, both ways (openat2, and the
O_NOFOLLOW walk used where openat2 is missing), and walking a tree through fds."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from corvid_actors.tools.base import PathDenied
from corvid_actors.tools.safe_open import (
    PATH_FLAGS,
    READ_FLAGS,
    ProjectTree,
    WalkStopped,
)


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def use_openat2(request) -> bool:
    return request.param


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\n")
    (root / ".env").write_text("SECRET=1\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("outside\n")
    return root


@pytest.fixture
def tree(project, use_openat2):
    with ProjectTree(project, use_openat2=use_openat2) as opened:
        yield opened


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def read(tree: ProjectTree, path: str, **kwargs) -> tuple[tuple[str, ...], str]:
    opened = tree.open(tuple(path.split("/")), READ_FLAGS, **kwargs)
    with os.fdopen(opened.fd) as handle:
        return opened.parts, handle.read()


def test_a_plain_path_opens_by_its_own_name(tree):
    assert read(tree, "src/a.py") == (("src", "a.py"), "x = 1\n")


def test_symlinks_inside_the_project_are_followed_and_named_by_their_target(tree, project):
    os.symlink("src", project / "alias")
    os.symlink("a.py", project / "src" / "rel.py")
    os.symlink(str(project / "src" / "a.py"), project / "abs.py")
    os.symlink("../alias/rel.py", project / "src" / "chain.py")
    for path in ("alias/a.py", "src/rel.py", "abs.py", "src/chain.py", "alias/chain.py"):
        assert read(tree, path) == (("src", "a.py"), "x = 1\n"), path


@pytest.mark.parametrize("target", ["{outside}/secret.txt", "../outside/secret.txt",
                                    "src/../../outside/secret.txt", "{outside}"])
def test_a_symlink_leading_out_is_refused(tree, project, tmp_path, target):
    os.symlink(target.format(outside=tmp_path / "outside"), project / "link")
    before = open_fds()
    name = "link/secret.txt" if target == "{outside}" else "link"
    with pytest.raises(PathDenied, match="Symlink escape denied"):
        tree.open(tuple(name.split("/")), READ_FLAGS, shown=name)
    assert open_fds() == before


def test_an_absolute_symlink_through_the_project_s_other_spelling_stays_inside(project, tmp_path,
                                                                              use_openat2):
    os.symlink(project, tmp_path / "project-link")
    os.symlink(str(tmp_path / "project-link" / "src" / "a.py"), project / "via-link.py")
    with ProjectTree(tmp_path / "project-link", use_openat2=use_openat2) as tree:
        assert read(tree, "via-link.py") == (("src", "a.py"), "x = 1\n")


def test_a_symlink_loop_fails_with_eloop(tree, project):
    os.symlink("b", project / "a")
    os.symlink("a", project / "b")
    with pytest.raises(OSError) as raised:
        tree.open(("a",), READ_FLAGS)
    assert raised.value.errno == errno.ELOOP


def test_the_check_judges_the_resolved_name_before_opening(tree, project):
    os.symlink(".env", project / "innocent.txt")
    seen: list[tuple[str, ...]] = []

    def check(parts):
        seen.append(parts)
        if parts == (".env",):
            raise PathDenied("protected")

    with pytest.raises(PathDenied, match="protected"):
        tree.open(("innocent.txt",), READ_FLAGS, check=check)
    assert seen[-1] == (".env",)


def test_an_inspecting_open_resolves_a_final_symlink_too(tree, project):
    os.symlink("src/a.py", project / "alias.py")
    opened = tree.open(("alias.py",), PATH_FLAGS)
    try:
        assert opened.parts == ("src", "a.py")
        assert stat.S_ISREG(os.fstat(opened.fd).st_mode)
    finally:
        os.close(opened.fd)


def test_missing_directories_are_created_below_the_fd_only(tree, project, tmp_path):
    opened = tree.open(("new", "dir", "b.txt"), os.O_WRONLY | os.O_CREAT, create_dirs=True)
    os.close(opened.fd)
    assert opened.parts == ("new", "dir", "b.txt") and (project / "new/dir/b.txt").is_file()
    os.symlink(tmp_path / "outside", project / "up")
    with pytest.raises(PathDenied, match="Symlink escape denied"):
        tree.open(("up", "made", "x.txt"), os.O_WRONLY | os.O_CREAT, create_dirs=True)
    assert sorted(os.listdir(tmp_path / "outside")) == ["secret.txt"]


def test_the_check_runs_before_a_directory_is_created(tree, project):
    def refuse_git(parts):
        if ".git" in parts:
            raise PathDenied("protected")

    with pytest.raises(PathDenied):
        tree.open((".git", "hooks", "x"), os.O_WRONLY | os.O_CREAT, create_dirs=True,
                  check=refuse_git)
    assert not (project / ".git").exists()


def test_dot_dot_cannot_climb_above_the_project(tree):
    with pytest.raises(PathDenied, match="Path traversal denied"):
        tree.open(("..", "outside", "secret.txt"), READ_FLAGS)


# --- walk -------------------------------------------------------------------------------


def walk(tree: ProjectTree, max_entries: int = 100, descend=lambda rel: True,
         should_stop=lambda: False) -> list[tuple[str, str]]:
    root = tree.open((), PATH_FLAGS)
    try:
        return [(e.relative, e.kind) for e in tree.walk(root.fd, "", max_entries=max_entries,
                                                         descend=descend,
                                                         should_stop=should_stop)]
    finally:
        os.close(root.fd)


def test_walk_lists_sorted_never_follows_symlinks_and_prunes(tree, project):
    os.symlink(".", project / "src" / "self")
    os.mkfifo(project / "src" / "pipe")
    (project / "skip").mkdir()
    (project / "skip" / "inner.txt").write_text("")
    assert walk(tree, descend=lambda rel: rel != "skip") == [
        (".env", "file"), ("skip", "dir"), ("src", "dir"), ("src/a.py", "file"),
        ("src/pipe", "special"), ("src/self", "symlink")]


def test_walk_stops_past_its_entry_cap_and_when_told(tree, project):
    for index in range(20):
        (project / "src" / f"f{index}").write_text("")
    with pytest.raises(WalkStopped) as raised:
        walk(tree, max_entries=5)
    assert raised.value.visited == 5
    with pytest.raises(WalkStopped, match="stopped"):
        walk(tree, should_stop=lambda: True)
