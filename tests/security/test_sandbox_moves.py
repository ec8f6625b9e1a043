"""Issue 33, breaks 2 and 3: protected files a command moves (a directory renamed, moved
into a directory the mask scan skips, moved back), run for real as root and as uid 65534.

Break 3 (data loss): the clean-up of "new protected files" must never delete a file that
existed before the command, whatever its name or path now. Break 2 (masks bypassed): a
mask follows the file: wherever a command moves a protected file or a ``.git``, the next
command cannot read it nor write into it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.security.as_user import shared_dir
from tests.security.conftest import ENV, SECRET

#: computed directory names: the guard refuses a command naming a directory of protected files
CERTS = "$(printf cert)s"
SUB = "$(printf su)b"
LIB = "$(printf li)b"
KEY = "-----BEGIN PRIVATE KEY-----\nSECRET-KEY-do-not-leak\n-----END PRIVATE KEY-----\n"


def with_certs(project: Path) -> None:
    (project / "certs").mkdir()
    (project / "certs" / "server.key").write_text(KEY)
    (project / "node_modules" / "pkg").mkdir(parents=True)
    (project / "node_modules" / "pkg" / "index.js").write_text("module.exports = 1\n")
    (project / "notes.txt").write_text("my notes\n")


def files_holding(project: Path, text: str) -> list[str]:
    """The project's files (host side) whose content holds ``text``, relative paths."""
    found = []
    for folder, _dirs, names in os.walk(project):
        for name in names:
            path = Path(folder) / name
            if not path.is_symlink() and text in path.read_text(errors="replace"):
                found.append(str(path.relative_to(project)))
    return sorted(found)


def assert_originals_kept(project: Path) -> None:
    """Every secret the project started with is still on the host, content intact."""
    assert len(files_holding(project, "SECRET-KEY-do-not-leak")) == 1
    assert len(files_holding(project, f"TOKEN={SECRET}")) == 1
    assert (project / ".env").read_text() == f"ANTHROPIC_API_KEY={SECRET}\n"


# --- break 3: the clean-up never deletes a file that existed before the command ----------


def test_renaming_a_directory_of_protected_files_deletes_nothing(daemon_factory):
    daemon = daemon_factory(arrange=with_certs)
    result = daemon.run(f"mv {CERTS} keys && mkdir -p deep/x && mv {SUB} deep/x/ && echo moved")
    assert "moved" in result.output, result.output
    assert (daemon.project / "keys" / "server.key").read_text() == KEY
    assert (daemon.project / "deep" / "x" / "sub" / ".env.local").read_text() == f"TOKEN={SECRET}\n"
    assert "removed" not in result.output
    assert_originals_kept(daemon.project)


def test_moving_protected_files_back_deletes_nothing(daemon_factory):
    daemon = daemon_factory(arrange=with_certs)
    daemon.run(f"mkdir -p away && mv {CERTS} {SUB} away/")
    daemon.run(f"mv away/{CERTS} away/{SUB} . ; echo back")
    assert_originals_kept(daemon.project)
    daemon.run(f"mv {CERTS} {SUB} node_modules/")
    daemon.run(f"mv node_modules/{CERTS} node_modules/{SUB} . ; echo back")
    assert_originals_kept(daemon.project)


def test_a_file_renamed_to_a_protected_name_is_kept_and_reported(daemon_factory):
    daemon = daemon_factory(arrange=with_certs)
    result = daemon.run(f"mv notes.txt {ENV}.production; echo renamed")
    assert (daemon.project / ".env.production").read_text() == "my notes\n"
    assert "kept" in result.output and ".env.production" in result.output, result.output
    # it is protected from now on: masked in the next command
    assert "my notes" not in daemon.run(f"cat {ENV}.production").output


def test_a_new_protected_file_is_still_removed(daemon_factory):
    daemon = daemon_factory(arrange=with_certs)
    # a deleted file's inode may be reused at once by the next file made: still new
    result = daemon.run(f"rm notes.txt; echo EVIL=1 > {ENV}.production; mkdir -p n/m; "
                        "echo k > n/m/new.k$(echo ey); echo done")
    assert not (daemon.project / ".env.production").exists()
    assert not (daemon.project / "n" / "m" / "new.key").exists()
    assert ".env.production" in result.output and "n/m/new.key" in result.output
    assert_originals_kept(daemon.project)


# --- break 2: a mask follows the file into the directories the scan skips ----------------


def test_protected_files_moved_into_a_skipped_directory_stay_masked(daemon_factory):
    daemon = daemon_factory(arrange=with_certs)
    daemon.run(f"mv {CERTS} {SUB} node_modules/")
    shown = daemon.run(f"cat node_modules/{CERTS}/* node_modules/{SUB}/* node_modules/{SUB}/.[a-z]*; "
                       "find . -type f | xargs cat")
    assert "SECRET" not in shown.output, shown.output
    assert_originals_kept(daemon.project)


def test_protected_files_moved_deep_into_a_skipped_directory_stay_masked(daemon_factory):
    daemon = daemon_factory(arrange=with_certs)
    daemon.run(f"mkdir -p node_modules/a/b/c && mv {CERTS} node_modules/a/b/c/ && "
               f"mv {SUB} node_modules/a/b/c/d")
    shown = daemon.run("find . -type f | xargs cat")
    assert "SECRET" not in shown.output, shown.output
    # a directory renamed to a skipped name, and one made in the same command
    daemon.run("mkdir -p x/.venv && find . -name '*.key' -o -name '.en*' | "
               "while read f; do mv \"$(dirname \"$f\")\" x/.venv/ 2>/dev/null; done; "
               f"mv {CERTS} .tox 2>/dev/null; true")
    shown = daemon.run("find . -type f | xargs cat")
    assert "SECRET" not in shown.output, shown.output
    assert_originals_kept(daemon.project)


def with_nested_repo(project: Path) -> None:
    with_certs(project)
    (project / "lib" / ".git" / "hooks").mkdir(parents=True)
    (project / "lib" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (project / "lib" / "code.py").write_text("x = 1\n")


def test_a_nested_git_moved_through_a_skipped_directory_gets_no_hook(daemon_factory):
    daemon = daemon_factory(arrange=with_nested_repo)
    daemon.run(f"mv {LIB} node_modules/")
    hooks = f"node_modules/{LIB}/.gi$(echo t)/hooks"
    daemon.run(f"mkdir -p {hooks}; printf '#!/bin/sh\\necho pwned\\n' > {hooks}/pre-commit; "
               f"chmod +x {hooks}/pre-commit")
    daemon.run(f"mv node_modules/{LIB} . 2>/dev/null || mv node_modules/{LIB}/.gi$(echo t) {LIB}/; true")
    # the user's repository got no hook (a .git the command made itself is its own business)
    assert not (daemon.project / "lib" / ".git" / "hooks" / "pre-commit").exists()
    assert list((daemon.project / "lib" / ".git" / "hooks").iterdir()) == []
    assert (daemon.project / "lib" / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"


def test_a_protected_file_whose_old_path_is_taken_goes_to_the_restored_directory(daemon_factory):
    daemon = daemon_factory(arrange=with_certs)
    result = daemon.run(f"mv {SUB} node_modules/ && mkdir {SUB} && mv notes.txt {SUB}/{ENV}.local")
    restored = daemon.project / ".corvid-restored" / "1" / "sub" / ".env.local"
    assert restored.read_text() == f"TOKEN={SECRET}\n", result.output
    assert (daemon.project / "sub" / ".env.local").read_text() == "my notes\n"
    assert "SECRET" not in daemon.run("find . -type f | xargs cat; ls -a .corvid-restored").output
    assert_originals_kept(daemon.project)


def test_putting_back_never_follows_a_symlink_the_command_planted(daemon_factory):
    outside = shared_dir("corvid-outside-")  # a directory either daemon user could write
    outside.chmod(0o777)
    try:
        daemon = daemon_factory(arrange=with_certs)
        daemon.run(f"mv {SUB} {CERTS} node_modules/ && ln -s {outside} {SUB} && "
                   f"ln -s {outside} {CERTS}")
        assert list(outside.iterdir()) == []
        assert_originals_kept(daemon.project)
        assert "SECRET" not in daemon.run("find . -type f | xargs cat").output
    finally:
        shutil.rmtree(outside, ignore_errors=True)
