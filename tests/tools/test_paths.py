"""Confinement to the project directory and protected-path matching."""

from __future__ import annotations

import os

import pytest

from corvid_actors.tools.base import PathDenied
from corvid_actors.tools.paths import (
    DEFAULT_PROTECTED_PATTERNS,
    is_protected,
    project_parts,
)


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\n")
    (root / ".env").write_text("SECRET=1\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("outside\n")
    return root


# --- project_parts (the path as written; ProjectTree, tests/tools/test_safe_open.py, opens it)


def test_relative_path_becomes_components_under_the_project(project):
    assert project_parts(project, "src/a.py") == ("src", "a.py")
    assert project_parts(project, ".") == ()
    assert project_parts(project, "src/../src/a.py") == ("src", "a.py")
    assert project_parts(project, "new/dir/b.txt") == ("new", "dir", "b.txt")


def test_absolute_path_inside_the_project_is_accepted(project):
    assert project_parts(project, str(project / "src" / "a.py")) == ("src", "a.py")


@pytest.mark.parametrize("path", ["/etc/passwd", "/", "/tmp"])
def test_absolute_path_outside_the_project_is_denied(project, path):
    with pytest.raises(PathDenied, match="outside the project"):
        project_parts(project, path)


@pytest.mark.parametrize("path", ["../x", "..", "src/../../x", "src/../../outside/secret.txt"])
def test_dot_dot_escape_is_denied(project, path):
    with pytest.raises(PathDenied, match="Path traversal denied"):
        project_parts(project, path)


def test_project_named_through_a_symlink_accepts_its_absolute_paths(project, tmp_path):
    os.symlink(project, tmp_path / "project-link")
    linked = tmp_path / "project-link"
    assert project_parts(linked, str(linked / "src" / "a.py")) == ("src", "a.py")
    assert project_parts(linked, str(project / "src" / "a.py")) == ("src", "a.py")


@pytest.mark.parametrize(
    ("path", "message"),
    [("", "empty"), ("~/.bashrc", "Home-relative"), ("~", "Home-relative"), ("a\0b", "NUL")],
)
def test_unusable_paths_are_denied_with_a_clear_message(project, path, message):
    with pytest.raises(PathDenied, match=message):
        project_parts(project, path)


# --- is_protected ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        ".env", ".env.local", ".env.production", ".envrc", "x.envrc", "prod.env", "foo/.env",
        ".ENV", ".git", ".git/", ".git/config", ".git/hooks/pre-commit", "vendor/lib/.git/HEAD",
        "corvid.db", "data/app.db-wal", "app.db-shm", "app.db-journal", "store.sqlite",
        "store.sqlite3", "cert.pem", "server.key", "id_rsa", "id_rsa.pub", "id_ed25519",
        "wallet-keystore.json", ".ssh/known_hosts", "./.env", "src/../.env",
    ],
)
def test_default_patterns_protect(project, path):
    assert is_protected(project, path)


@pytest.mark.parametrize(
    "path",
    [
        "src/a.py", ".gitignore", ".github/workflows/ci.yml", "environment.py", "README.md",
        "git/config", "keys.py", "database.py", "db/models.py", "src", ".", "",
    ],
)
def test_default_patterns_leave_ordinary_files_alone(project, path):
    assert not is_protected(project, path)


def test_absolute_paths_are_judged_too(project):
    assert is_protected(project, str(project / ".env"))
    assert is_protected(project, "/home/someone/.ssh/id_rsa")
    assert not is_protected(project, str(project / "src" / "a.py"))


def test_a_symlink_pointing_at_a_protected_file_is_protected(project):
    os.symlink(project / ".env", project / "harmless.txt")
    os.symlink(project / ".git", project / "gitdir")
    assert is_protected(project, "harmless.txt")
    assert is_protected(project, "gitdir/config")


def test_custom_patterns_replace_the_defaults(project):
    patterns = ("CLAUDE.md", "server/selftest/")
    assert is_protected(project, "CLAUDE.md", patterns)
    assert is_protected(project, "docs/CLAUDE.md", patterns)
    assert is_protected(project, "server/selftest/run.py", patterns)
    assert is_protected(project, "server/selftest", patterns)
    assert not is_protected(project, "other/server/selftest/run.py", patterns)
    assert not is_protected(project, ".env", patterns)


def test_defaults_cover_the_documented_families():
    joined = " ".join(DEFAULT_PROTECTED_PATTERNS)
    for family in (".env", ".git/", "*.db", "*.pem", "*.key", "id_rsa", "keystore", ".ssh/"):
        assert family in joined


def test_walk_tree_is_bounded_prunes_and_never_follows_symlinks(tmp_path):
    from corvid_actors.tools.paths import TreeTooLarge, walk_tree

    (tmp_path / "a" / "deep").mkdir(parents=True)
    (tmp_path / "a" / "deep" / "x").write_text("")
    (tmp_path / "skip" / "inner").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a")
    seen = {os.path.relpath(e.path, tmp_path)
            for e in walk_tree(str(tmp_path), 100, lambda e: e.name != "skip")}
    assert seen == {"a", "a/deep", "a/deep/x", "skip", "link"}  # skip/ seen, not entered; link not followed
    with pytest.raises(TreeTooLarge):
        list(walk_tree(str(tmp_path), 3, lambda e: True))


def test_the_sandbox_refuses_a_project_too_big_to_mask(tmp_path):
    from corvid_actors.tools.sandbox._probe import SandboxSettings, SandboxUnavailable
    from corvid_actors.tools.sandbox._scan import scan_project

    for n in range(5):
        (tmp_path / f"f{n}").write_text("")
    (tmp_path / ".env").write_text("SECRET=1")
    assert scan_project(str(tmp_path), (".env*",), SandboxSettings()).masked_files == (str(tmp_path / ".env"),)
    with pytest.raises(SandboxUnavailable, match="more than 3 entries"):
        scan_project(str(tmp_path), (".env*",), SandboxSettings(mask_walk_max_entries=3))
