"""Attacks on the daemon-side file tools (issue 33, breaks 4–6), as root and as uid 65534.

The file tools run in the daemon's own process, not in the sandbox: what confines them is
how they open paths. Each attack runs for real against the ``daemon`` fixture; a racing
process is a subprocess of the (root) test, as another session's command would be.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from corvid_actors.tools.base import PathDenied
from corvid_actors.tools.safe_open import READ_FLAGS, ProjectTree
from tests.security.as_user import Daemon, shared_dir
from tests.security.conftest import make_project

#: how long one race runs, and at most how many tool calls it makes
RACE_S = 1.0
RACE_MAX_CALLS = 5000
OUTSIDE_SECRET = "OUTSIDE-SECRET"

#: the racer: swaps ``sub`` (a real directory) and ``sub_alt`` (a symlink to the outside
#: directory) atomically with renameat2(RENAME_EXCHANGE), in a loop, until its deadline
_SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b, until = sys.argv[1].encode(), sys.argv[2].encode(), time.monotonic() + float(sys.argv[3])
print("ready", flush=True)
swaps = 0
while time.monotonic() < until:
    for _ in range(200):
        if libc.renameat2(-100, a, -100, b, 2) != 0:
            sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
        swaps += 1
if swaps % 2:
    libc.renameat2(-100, a, -100, b, 2)  # leave sub a real directory
"""


def outside_dir(daemon_project: Path) -> Path:
    """``<base>/outside``: next to the project, 0777, a file any uid may read and write —
    so an escape as uid 65534 would succeed if the tool let it."""
    return daemon_project.parent / "outside"


def arrange_race(project: Path) -> None:
    outside = outside_dir(project)
    outside.mkdir()
    outside.chmod(0o777)
    (outside / "data.txt").write_text(f"value = 1 {OUTSIDE_SECRET}\n")
    (outside / "data.txt").chmod(0o666)
    (project / "sub" / "data.txt").write_text("value = 1 inside\n")
    os.symlink(outside, project / "sub_alt")


class Swapper:
    """The racing process: started, and always ended, around a ``with`` block."""

    def __init__(self, project: Path, seconds: float) -> None:
        self.argv = [sys.executable, "-c", _SWAPPER, str(project / "sub"),
                     str(project / "sub_alt"), str(seconds)]

    def __enter__(self) -> Swapper:
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.process.wait(RACE_S + 10)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(5)
            if self.process.stdout:
                self.process.stdout.close()
        assert self.process.returncode == 0, "the swapper failed"


def race(daemon: Daemon, name: str, args_of) -> list[str]:
    """Call tool ``name`` while ``sub`` is being swapped; every result's output."""
    outputs: list[str] = []
    deadline = time.monotonic() + RACE_S
    with Swapper(daemon.project, RACE_S + 0.2):
        while time.monotonic() < deadline and len(outputs) < RACE_MAX_CALLS:
            outputs.append(daemon.tool(name, wait_s=10, **args_of(len(outputs))).output)
    return outputs


def assert_outside_untouched(project: Path) -> None:
    outside = outside_dir(project)
    assert sorted(os.listdir(outside)) == ["data.txt"], "a file was written outside the project"
    assert (outside / "data.txt").read_text() == f"value = 1 {OUTSIDE_SECRET}\n"


# --- break 4: a directory swapped for a symlink after the check -------------------------


def test_read_file_never_reads_outside_through_a_swapped_directory(daemon_factory):
    daemon = daemon_factory(arrange=arrange_race)
    outputs = race(daemon, "read_file", lambda i: {"path": "sub/data.txt"})
    leaked = [o for o in outputs if OUTSIDE_SECRET in o]
    assert not leaked, f"{len(leaked)} of {len(outputs)} reads returned the outside file"
    assert any("inside" in o for o in outputs)  # the race let the tool work in between
    assert_outside_untouched(daemon.project)


def test_write_file_never_writes_outside_through_a_swapped_directory(daemon_factory):
    daemon = daemon_factory(arrange=arrange_race)
    outputs = race(daemon, "write_file",
                   lambda i: {"path": f"sub/new-{i % 50}.txt", "content": "pwned\n"})
    assert_outside_untouched(daemon.project)
    assert any(o.startswith(("Created", "Overwrote")) for o in outputs)


def test_edit_file_never_edits_outside_through_a_swapped_directory(daemon_factory):
    daemon = daemon_factory(arrange=arrange_race)

    def flip(i: int) -> dict[str, str]:
        old, new = ("value = 1", "value = 2") if i % 2 == 0 else ("value = 2", "value = 1")
        return {"path": "sub/data.txt", "old_string": old, "new_string": new}

    outputs = race(daemon, "edit_file", flip)
    assert_outside_untouched(daemon.project)
    assert any(o.startswith("Edited") for o in outputs)


@pytest.mark.parametrize("use_openat2", [True, False], ids=["openat2", "walk"])
def test_project_tree_never_leaves_the_project_under_the_race_either_way(use_openat2):
    base = shared_dir("corvid-race-")
    project = make_project(base / "project")
    arrange_race(project)
    counts = {"inside": 0, "refused": 0, "leaked": 0, "written": 0}
    try:
        deadline = time.monotonic() + RACE_S
        with Swapper(project, RACE_S + 0.2), ProjectTree(project, use_openat2=use_openat2) as tree:
            while time.monotonic() < deadline and sum(counts.values()) < 4 * RACE_MAX_CALLS:
                try:
                    opened = tree.open(("sub", "data.txt"), READ_FLAGS)
                    with os.fdopen(opened.fd) as handle:
                        counts["leaked" if OUTSIDE_SECRET in handle.read() else "inside"] += 1
                    opened = tree.open(("sub", "made", "new.txt"), os.O_WRONLY | os.O_CREAT,
                                       create_dirs=True)
                    os.close(opened.fd)
                    counts["written"] += 1
                except PathDenied:
                    counts["refused"] += 1
        assert counts["leaked"] == 0, counts
        assert counts["inside"] and counts["refused"], counts  # both sides of the race were met
        assert_outside_untouched(project)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_an_in_project_symlink_to_a_protected_file_stays_protected(daemon_factory):
    def arrange(project: Path) -> None:
        os.symlink(".env", project / "innocent.txt")
        os.symlink("sub", project / "alias")
        os.symlink("../.git", project / "sub" / "gitlink")

    daemon = daemon_factory(arrange=arrange)
    assert daemon.tool("read_file", path="innocent.txt").is_error
    assert daemon.tool("write_file", path="innocent.txt", content="pwned").is_error
    assert daemon.tool("edit_file", path="innocent.txt", old_string="ANTHROPIC",
                       new_string="X").is_error
    assert daemon.tool("write_file", path="alias/gitlink/HEAD", content="pwned").is_error
    assert daemon.tool("read_file", path="alias/.env.local").is_error
    assert "SECRET" in (daemon.project / ".env").read_text()
    assert (daemon.project / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    # a symlink that stays inside and names nothing protected still works
    assert daemon.tool("read_file", path="alias/../README.md").output == "1\thello"
    assert not daemon.tool("write_file", path="alias/ok.txt", content="ok\n").is_error
    assert (daemon.project / "sub" / "ok.txt").read_text() == "ok\n"


# --- break 5: a FIFO (and a device node) in the project ---------------------------------


def arrange_special_files(project: Path) -> None:
    os.mkfifo(project / "pipe")
    os.mknod(project / "sub" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (project / "sub" / "notes.txt").write_text("needle here\n")


def bounded_tool(daemon: Daemon, fifo: Path | None, name: str, limit_s: float = 5.0, **args):
    """The tool's result, failing (never hanging) when it has not answered in ``limit_s``.
    A tool stuck on ``fifo`` in this process is released by opening the FIFO."""
    if daemon.user != "root":
        return daemon.tool(name, wait_s=limit_s, **args)  # the child is killed past it
    box: list = []
    worker = threading.Thread(target=lambda: box.append(daemon.tool(name, **args)), daemon=True)
    worker.start()
    worker.join(limit_s)
    if worker.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))  # unblocks a reader or a writer
            worker.join(limit_s)
        pytest.fail(f"{name} did not return within {limit_s} s")
    return box[0]


def test_read_file_on_a_fifo_fails_at_once(daemon_factory):
    daemon = daemon_factory(arrange=arrange_special_files)
    result = bounded_tool(daemon, daemon.project / "pipe", "read_file", path="pipe")
    assert result.is_error and "not a regular file" in result.output
    result = bounded_tool(daemon, daemon.project / "pipe", "read_file", path="sub/null")
    assert result.is_error and "not a regular file" in result.output


def test_write_and_edit_on_a_fifo_fail_at_once(daemon_factory):
    daemon = daemon_factory(arrange=arrange_special_files)
    pipe = daemon.project / "pipe"
    result = bounded_tool(daemon, pipe, "write_file", path="pipe", content="x")
    assert result.is_error and "not a regular file" in result.output
    result = bounded_tool(daemon, pipe, "edit_file", path="pipe", old_string="a", new_string="b")
    assert result.is_error and "not a regular file" in result.output


def test_search_files_skips_fifos_and_devices_and_says_so(daemon_factory):
    daemon = daemon_factory(arrange=arrange_special_files)
    result = bounded_tool(daemon, daemon.project / "pipe", "search_files", pattern="needle")
    lines = result.output.splitlines()
    assert lines[0] == "sub/notes.txt:1:needle here"
    assert "skipped 2 special files" in result.output
    assert "pipe" in result.output and "sub/null" in result.output


# --- break 6: a recursive glob over self-referencing symlinks ---------------------------


def test_list_files_over_self_referencing_symlinks_returns_at_once(daemon_factory):
    def arrange(project: Path) -> None:
        (project / "loop").mkdir()
        (project / "loop" / "y").write_text("")
        for name in ("a", "b", "c"):
            os.symlink(".", project / "loop" / name)

    daemon = daemon_factory(arrange=arrange)
    result = bounded_tool(daemon, None, "list_files", path="loop/**/x")
    assert result.output == "No files match loop/**/x"
    assert bounded_tool(daemon, None, "list_files", path="loop/**/y").output == "loop/y"
    result = bounded_tool(daemon, None, "list_files", path="**/*")
    assert "loop/a" in result.output.splitlines()  # listed, not entered
    assert "loop/a/y" not in result.output
