"""The six coding tools: behaviour, limits and every expected failure."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from corvid_actors.core.vocabulary import CancelToken, ToolKind
from corvid_actors.tools.base import ToolContext
from corvid_actors.tools.coding import CODING_TOOL_NAMES, coding_tools, describe_tool_call
from corvid_actors.tools.coding_base import CodingToolSettings, truncate_middle
from corvid_actors.tools.env import safe_env


class RealTimers:
    """A tiny test-only ``call_later`` on real time (threading.Timer)."""

    def __init__(self) -> None:
        self.timers: list[threading.Timer] = []

    def __call__(self, delay, fn):
        timer = threading.Timer(delay, fn)
        timer.daemon = True
        timer.start()
        self.timers.append(timer)
        return timer.cancel

    def cancel_all(self) -> None:
        for timer in self.timers:
            timer.cancel()


class RecordingTimers:
    """Records the delays asked for; fires nothing (or everything at once, if told)."""

    def __init__(self, fire_at_once: bool = False) -> None:
        self.delays: list[float] = []
        self.fire_at_once = fire_at_once

    def __call__(self, delay, fn):
        self.delays.append(delay)
        if self.fire_at_once:
            fn()
        return lambda: None


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\ny = 2\nx = 3\n")
    (root / "README.md").write_text("# demo\n")
    (root / ".env").write_text("SECRET=hunter2\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "corvid.db").write_text("db")
    (tmp_path / "outside.txt").write_text("outside\n")
    return root


@pytest.fixture
def timers():
    real = RealTimers()
    yield real
    real.cancel_all()


@pytest.fixture
def ctx(project, timers):
    return ToolContext(project_dir=project, env=safe_env({"PROJECT_VAR": "yes"}), call_later=timers)


def call(name, ctx, settings=None, **args):
    tools = {tool.name: tool for tool in coding_tools(settings or CodingToolSettings())}
    return tools[name].handler(args, ctx)


def bounded(fn, limit_s: float = 5.0):
    """Run ``fn`` on a thread and fail (not hang) if it has not returned within ``limit_s``."""
    box: list = []
    worker = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    worker.start()
    worker.join(limit_s)
    assert not worker.is_alive(), f"did not return within {limit_s} s"
    return box[0]


def until(predicate, limit_s: float = 5.0) -> bool:
    """Poll ``predicate`` until it holds (True) or ``limit_s`` real seconds pass (False)."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def process_gone(pid: int) -> bool:
    """Dead: no /proc entry, or a zombie waiting for its (new) parent to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


# --- specs -----------------------------------------------------------------------------


def test_the_six_tools_with_kinds_and_required_parameters():
    tools = {tool.name: tool for tool in coding_tools()}
    assert tuple(tools) == CODING_TOOL_NAMES
    expected = {
        "read_file": (ToolKind.READ, ["path"]),
        "write_file": (ToolKind.EDIT, ["path", "content"]),
        "edit_file": (ToolKind.EDIT, ["path", "old_string", "new_string"]),
        "list_files": (ToolKind.READ, []),
        "search_files": (ToolKind.READ, ["pattern"]),
        "run_command": (ToolKind.COMMAND, ["command"]),
    }
    for name, (kind, required) in expected.items():
        assert tools[name].kind is kind
        assert tools[name].spec.parameters["required"] == required
        assert set(required) <= set(tools[name].spec.parameters["properties"])


# --- read_file -------------------------------------------------------------------------


def test_read_file_numbers_lines(ctx):
    result = call("read_file", ctx, path="src/a.py")
    assert not result.is_error
    assert result.output == "1\tx = 1\n2\ty = 2\n3\tx = 3"


def test_read_file_offset_and_limit(ctx):
    assert call("read_file", ctx, path="src/a.py", offset=2, limit=1).output == "2\ty = 2"
    assert call("read_file", ctx, path="src/a.py", offset="3").output == "3\tx = 3"


def test_read_file_offset_past_the_end(ctx):
    result = call("read_file", ctx, path="src/a.py", offset=10)
    assert result.is_error and "past the end" in result.output and "3 lines" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "Missing required parameter 'path'"),
        ({"path": 5}, "Invalid 'path'"),
        ({"path": ""}, "Invalid 'path'"),
        ({"path": "src/a.py", "offset": 0}, "Invalid 'offset'"),
        ({"path": "src/a.py", "offset": "two"}, "Invalid 'offset'"),
        ({"path": "src/a.py", "limit": -1}, "Invalid 'limit'"),
        ({"path": "src/a.py", "limit": 1.5}, "Invalid 'limit'"),
        ({"path": "nope.txt"}, "File not found: nope.txt"),
        ({"path": "src"}, "is a directory"),
        ({"path": "../outside.txt"}, "Path traversal denied"),
        ({"path": "/etc/passwd"}, "outside the project"),
        ({"path": ".env"}, "Cannot read protected file: .env"),
    ],
)
def test_read_file_errors(ctx, args, message):
    result = call("read_file", ctx, **args)
    assert result.is_error
    assert message in result.output


def test_read_file_symlink_escape_is_denied(ctx, project, tmp_path):
    os.symlink(tmp_path / "outside.txt", project / "escape.txt")
    result = call("read_file", ctx, path="escape.txt")
    assert result.is_error and "Symlink escape denied" in result.output


def test_read_file_absolute_path_inside_the_project(ctx, project):
    result = call("read_file", ctx, path=str(project / "README.md"))
    assert result.output == "1\t# demo"


def test_read_file_binary_and_empty(ctx, project):
    (project / "blob.bin").write_bytes(b"\x00\x01\x02")
    (project / "empty.txt").write_text("")
    assert "binary" in call("read_file", ctx, path="blob.bin").output
    result = call("read_file", ctx, path="empty.txt")
    assert not result.is_error and "empty file" in result.output


def test_read_file_output_is_middle_truncated(ctx, project):
    (project / "big.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
    result = call("read_file", ctx, path="big.txt")
    assert len(result.output) < 8000
    assert "characters truncated] ..." in result.output
    assert result.output.startswith("1\tline 0")
    assert result.output.endswith("5000\tline 4999")
    assert result.full_output is not None and "2500\tline 2499" in result.full_output


# --- write_file ------------------------------------------------------------------------


def test_write_file_creates_parents_and_overwrites(ctx, project):
    result = call("write_file", ctx, path="new/dir/b.txt", content="hello\n")
    assert not result.is_error and "Created" in result.output
    assert (project / "new/dir/b.txt").read_text() == "hello\n"
    result = call("write_file", ctx, path="new/dir/b.txt", content="")
    assert not result.is_error and "Overwrote" in result.output
    assert (project / "new/dir/b.txt").read_text() == ""


@pytest.mark.parametrize("path", [".env", ".git/config", "corvid.db", ".env.local"])
def test_write_file_refuses_protected_paths(ctx, project, path):
    before = (project / path).read_text() if (project / path).exists() else None
    result = call("write_file", ctx, path=path, content="pwned")
    assert result.is_error and result.output == f"Cannot modify protected file: {path}"
    after = (project / path).read_text() if (project / path).exists() else None
    assert after == before


def test_write_file_through_a_symlink_to_a_protected_file_is_refused(ctx, project):
    os.symlink(project / ".env", project / "innocent.txt")
    result = call("write_file", ctx, path="innocent.txt", content="pwned")
    assert result.is_error and "protected" in result.output
    assert (project / ".env").read_text() == "SECRET=hunter2\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"content": "x"}, "Missing required parameter 'path'"),
        ({"path": "a.txt"}, "Missing required parameter 'content'"),
        ({"path": "a.txt", "content": 3}, "Invalid 'content'"),
        ({"path": "../a.txt", "content": "x"}, "Path traversal denied"),
        ({"path": "/tmp/a.txt", "content": "x"}, "outside the project"),
        ({"path": "src", "content": "x"}, "is a directory"),
    ],
)
def test_write_file_errors(ctx, args, message):
    result = call("write_file", ctx, **args)
    assert result.is_error and message in result.output


def test_write_file_symlink_escape_does_not_write_outside(ctx, project, tmp_path):
    os.symlink(tmp_path, project / "up")
    result = call("write_file", ctx, path="up/pwned.txt", content="x")
    assert result.is_error and "Symlink escape denied" in result.output
    assert not (tmp_path / "pwned.txt").exists()


# --- edit_file -------------------------------------------------------------------------


def test_edit_file_replaces_the_single_occurrence(ctx, project):
    result = call("edit_file", ctx, path="src/a.py", old_string="y = 2", new_string="y = 20")
    assert not result.is_error
    assert (project / "src/a.py").read_text() == "x = 1\ny = 20\nx = 3\n"


def test_edit_file_zero_occurrences(ctx, project):
    result = call("edit_file", ctx, path="src/a.py", old_string="z = 9", new_string="z")
    assert result.is_error and "not found" in result.output and "read the file" in result.output
    assert (project / "src/a.py").read_text() == "x = 1\ny = 2\nx = 3\n"


def test_edit_file_more_than_one_occurrence(ctx, project):
    result = call("edit_file", ctx, path="src/a.py", old_string="x = ", new_string="w = ")
    assert result.is_error and "occurs 2 times" in result.output and "context" in result.output
    assert (project / "src/a.py").read_text() == "x = 1\ny = 2\nx = 3\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"path": "src/a.py", "old_string": "x", "new_string": "x"}, "identical"),
        ({"path": "src/a.py", "old_string": "x"}, "Missing required parameter 'new_string'"),
        ({"path": "src/a.py", "new_string": "x"}, "Missing required parameter 'old_string'"),
        ({"path": "src/a.py", "old_string": "", "new_string": "x"}, "Invalid 'old_string'"),
        ({"path": "gone.py", "old_string": "a", "new_string": "b"}, "File not found"),
        ({"path": ".env", "old_string": "SECRET", "new_string": "X"}, "Cannot modify protected"),
        ({"path": ".git/config", "old_string": "core", "new_string": "x"}, "Cannot modify"),
        ({"path": "../x", "old_string": "a", "new_string": "b"}, "Path traversal denied"),
    ],
)
def test_edit_file_errors(ctx, args, message):
    result = call("edit_file", ctx, **args)
    assert result.is_error and message in result.output


# --- list_files ------------------------------------------------------------------------


def test_list_files_directory(ctx):
    lines = call("list_files", ctx).output.splitlines()
    assert ".env  (15 bytes)" in lines
    assert ".git/" in lines and "src/" in lines
    assert lines == sorted(lines)


def test_list_files_glob_is_sorted_and_skips_dotfiles(ctx, project):
    (project / "src" / "b.py").write_text("")
    (project / "src" / "deep").mkdir()
    (project / "src" / "deep" / "c.py").write_text("")
    (project / ".hidden.py").write_text("")
    result = call("list_files", ctx, path="**/*.py")
    assert result.output.splitlines() == ["src/a.py", "src/b.py", "src/deep/c.py"]
    assert call("list_files", ctx, path="src/*.{py,md}").output.splitlines() == [
        "src/a.py", "src/b.py"
    ]


def test_list_files_caps_entries(ctx, project):
    for index in range(6):
        (project / "src" / f"f{index}.txt").write_text("")
    result = call("list_files", ctx, CodingToolSettings(list_max_entries=3), path="src")
    assert len(result.output.splitlines()) == 4
    assert "4 more entries not shown" in result.output


@pytest.mark.parametrize(
    ("path", "message"),
    [("../*", "must stay inside"), ("/etc/*", "must stay inside"), ("../", "Path traversal"),
     ("missing", "Not found")],
)
def test_list_files_errors(ctx, path, message):
    result = call("list_files", ctx, path=path)
    assert result.is_error and message in result.output


def test_list_files_glob_does_not_follow_symlinks_out(ctx, project, tmp_path):
    os.symlink(tmp_path / "outside.txt", project / "out.txt")
    assert "out.txt" not in call("list_files", ctx, path="*.txt").output


# --- search_files ----------------------------------------------------------------------


def test_search_files_reports_relative_paths_and_line_numbers(ctx):
    result = call("search_files", ctx, pattern=r"^x = \d")
    assert result.output.splitlines() == ["src/a.py:1:x = 1", "src/a.py:3:x = 3"]


def test_search_files_glob_filter_and_single_file(ctx):
    assert call("search_files", ctx, pattern="demo", glob="*.py").output.startswith("No matches")
    assert call("search_files", ctx, pattern="demo", glob="*.md").output == "README.md:1:# demo"
    assert call("search_files", ctx, pattern="y", path="src/a.py").output == "src/a.py:2:y = 2"


def test_search_files_skips_git_node_modules_binaries_and_protected(ctx, project):
    (project / "node_modules").mkdir()
    (project / "node_modules" / "m.js").write_text("needle\n")
    (project / ".git" / "needle").write_text("needle\n")
    (project / "blob.bin").write_bytes(b"needle\x00\n")
    (project / ".env.local").write_text("needle\n")
    (project / "src" / "ok.txt").write_text("needle\n")
    assert call("search_files", ctx, pattern="needle").output == "src/ok.txt:1:needle"
    assert call("search_files", ctx, pattern="hunter2").output.startswith("No matches")


def test_search_files_caps_lines(ctx, project):
    (project / "many.txt").write_text("hit\n" * 50)
    result = call("search_files", ctx, CodingToolSettings(search_max_lines=5), pattern="hit")
    lines = result.output.splitlines()
    assert len(lines) == 6 and "more than 5 matching lines" in lines[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [({"pattern": "("}, "Invalid 'pattern': not a valid regular expression"),
     ({}, "Missing required parameter 'pattern'"),
     ({"pattern": "x", "path": "../"}, "Path traversal denied")],
)
def test_search_files_errors(ctx, args, message):
    result = call("search_files", ctx, **args)
    assert result.is_error and message in result.output


def test_search_files_time_limit_goes_through_call_later(project):
    timers = RecordingTimers(fire_at_once=True)
    ctx = ToolContext(project_dir=project, call_later=timers)
    result = call("search_files", ctx, pattern="x")
    assert timers.delays == [15]
    assert "search stopped after 15 s" in result.output


# --- run_command -----------------------------------------------------------------------


def test_run_command_stdout_and_stderr(ctx):
    result = call("run_command", ctx, command="echo out; echo err >&2")
    assert not result.is_error
    assert result.output == "out\n\n[stderr]\nerr\n"


def test_run_command_no_output_and_exit_codes(ctx):
    assert call("run_command", ctx, command="true").output == "(no output, exit code: 0)"
    result = call("run_command", ctx, command="echo partial; exit 3")
    assert result.is_error and result.output.startswith("Exit code 3") and "partial" in result.output


def test_run_command_runs_in_the_project_with_exactly_the_given_env(project, timers):
    ctx = ToolContext(project_dir=project, env={"ONLY": "this", "PATH": os.environ["PATH"]},
                      call_later=timers)
    result = call("run_command", ctx, command='pwd; echo "$ONLY[$HOME]"')
    assert result.output.splitlines() == [os.path.realpath(project), "this[]"]


def test_run_command_output_is_middle_truncated(ctx):
    result = call("run_command", ctx, command="head -c 20000 /dev/zero | tr '\\0' a")
    # the original's marker and arithmetic: ⌊8000/2⌋ − 30 characters from each end
    assert result.output == "a" * 3970 + "\n\n... [12060 characters truncated] ...\n\n" + "a" * 3970
    assert result.full_output == "a" * 20000


def test_run_command_timeout_default_and_cap(project):
    timers = RecordingTimers()
    ctx = ToolContext(project_dir=project, call_later=timers)
    call("run_command", ctx, command="true")
    call("run_command", ctx, command="true", timeout=5)
    call("run_command", ctx, command="true", timeout=1000)
    assert timers.delays == [30, 5, 120]


@pytest.mark.parametrize("timeout", [0, -1, "soon", True])
def test_run_command_invalid_timeout(ctx, timeout):
    result = call("run_command", ctx, command="true", timeout=timeout)
    assert result.is_error and "Invalid 'timeout'" in result.output


def test_run_command_timeout_kills_the_whole_process_group(ctx, project):
    # the grandchild keeps stdout open: only a group kill lets the read reach EOF
    pid_file = project / "gc.pid"
    for timeout_s in (1, 3):  # under load the shell may not have recorded the grandchild within 1 s
        result = bounded(lambda t=timeout_s: call("run_command", ctx, timeout=t,
                                                  command="sleep 30 & echo $! > gc.pid; sleep 30"),
                         limit_s=timeout_s + 9.0)
        assert result.is_error and result.output.startswith(f"Command timed out after {timeout_s} s")
        if pid_file.exists() and pid_file.read_text().endswith("\n"):
            break
    grandchild = int(pid_file.read_text())
    assert until(lambda: process_gone(grandchild))  # SIGKILL is delivered, not instantaneous


def test_run_command_cancel_kills_the_whole_process_group(ctx, project):
    token = CancelToken()
    ctx.cancel = token
    pid_file = project / "gc.pid"

    def cancel_once_the_grandchild_is_recorded() -> None:
        # a condition, not an instant: under load the shell may take seconds to get this far
        if until(lambda: pid_file.exists() and pid_file.read_text().endswith("\n")):
            token.cancel()

    trigger = threading.Thread(target=cancel_once_the_grandchild_is_recorded, daemon=True)
    trigger.start()
    try:
        result = bounded(
            lambda: call("run_command", ctx, command="sleep 30 & echo $! > gc.pid; sleep 30"),
            limit_s=10.0,
        )
    finally:
        token.cancel()  # never leave the command (or the trigger's wait) running
        trigger.join(10.0)
    assert result.is_error and result.output.startswith("Command cancelled")
    # SIGKILL is queued at once but the grandchild dies when next scheduled: wait for it, bounded
    grandchild = int(pid_file.read_text())
    assert until(lambda: process_gone(grandchild)), f"grandchild {grandchild} survived the cancel"


def test_run_command_already_cancelled_does_not_run(ctx, project):
    ctx.cancel.cancel()
    result = call("run_command", ctx, command="touch ran.txt")
    assert result.is_error and "cancelled" in result.output
    assert not (project / "ran.txt").exists()


@pytest.mark.parametrize(
    "command", ["echo x > .env", "cat .env", "rm -rf .", "sh -c 'echo x >> .git/config'",
                "cp src/a.py corvid.db"]
)
def test_run_command_refuses_protected_paths(ctx, project, command):
    result = call("run_command", ctx, command=command)
    assert result.is_error and result.output.startswith("Cannot modify protected file")
    assert (project / ".env").read_text() == "SECRET=hunter2\n"
    assert (project / ".git" / "config").read_text() == "[core]\n"
    assert (project / "corvid.db").read_text() == "db"


def test_run_command_refuses_dangerous_commands(ctx):
    result = call("run_command", ctx, command="sudo rm -rf /tmp/x")
    assert result.is_error and result.output.startswith("Blocked dangerous command")


def test_run_command_missing_command(ctx):
    result = call("run_command", ctx)
    assert result.is_error and "Missing required parameter 'command'" in result.output


# --- helpers ---------------------------------------------------------------------------


def test_truncate_middle():
    assert truncate_middle("short", 10) == "short"
    cut = truncate_middle("a" * 50 + "b" * 50, 20)  # small limits keep a quarter for the marker
    assert cut == "a" * 5 + "\n\n... [90 characters truncated] ...\n\n" + "b" * 5
    assert truncate_middle("a" * 9000, 8000) == "a" * 3970 + "\n\n... [1060 characters truncated] ...\n\n" + "a" * 3970


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("run_command", {"command": "ls -la"}, "Run command: ls -la"),
        ("write_file", {"path": "a.py"}, "Write file: a.py"),
        ("edit_file", {"path": "a.py"}, "Edit file: a.py"),
        ("read_file", {"path": "a.py"}, "Read file: a.py"),
        ("list_files", {"path": "src"}, "List files: src"),
        ("list_files", {}, "List files: ."),
        ("search_files", {"pattern": "TODO"}, "Search: TODO"),
        ("Write", {"file_path": "b.py"}, "Write file: b.py"),
        ("WebFetch", {"url": "https://x"}, "Fetch URL: https://x"),
        ("WebSearch", {"query": "q"}, "Web search: q"),
        # issue 14: a delegation's approval names the recipient and shows the message
        ("corvid_send_message", {"to_agent": "a"}, "Message agent a: (no message)"),
        ("corvid_send_message", {"to_agent": "Bob", "message": "x" * 1001},
         "Message agent Bob: " + "x" * 1000 + "… (1001 characters)"),
    ],
)
def test_describe_tool_call(name, args, expected):
    assert describe_tool_call(name, args) == expected


def test_describe_tool_call_cuts_long_commands_at_400():
    description = describe_tool_call("run_command", {"command": "x" * 1000})
    assert description == "Run command: " + "x" * 400


def test_edit_file_refuses_a_file_that_is_not_utf8(ctx, project):
    (project / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    result = call("edit_file", ctx, path="latin1.txt", old_string="caf", new_string="tea")
    assert result.is_error and "not UTF-8" in result.output


def test_read_file_keeps_windows_line_endings_out_of_the_text(ctx, project):
    (project / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    assert call("read_file", ctx, path="crlf.txt").output == "1\ta\n2\tb"


# --- limits inside one file and one walk (issue 33, breaks 5 and 6) --------------------


def test_search_files_stops_inside_a_huge_file_at_its_deadline(project, timers):
    with open(project / "huge.txt", "wb") as handle:  # ~8 MB: seconds to scan, line by line
        handle.write(b"a\n" * 4_000_000 + b"needle\n")
    settings = CodingToolSettings(search_timeout_s=0.05, search_max_file_bytes=1 << 30)
    ctx = ToolContext(project_dir=project, call_later=timers)
    result = bounded(lambda: call("search_files", ctx, settings, pattern="needle", path="."),
                     limit_s=60)
    assert "search stopped after 0.05 s" in result.output
    assert "huge.txt:4000001:needle" not in result.output  # stopped mid-file, not after it


def test_search_files_stops_when_the_session_is_cancelled(project):
    token = CancelToken()

    def call_later(delay, fn):  # the session is stopped just as the search begins
        token.cancel()
        return lambda: None

    ctx = ToolContext(project_dir=project, cancel=token, call_later=call_later)
    result = call("search_files", ctx, pattern="x")
    assert result.is_error and result.output == "search_files cancelled: x"


def test_list_files_glob_reports_its_entry_cap(ctx, project):
    for index in range(30):
        (project / "src" / f"f{index}.txt").write_text("")
    result = call("list_files", ctx, CodingToolSettings(list_walk_max_entries=10), path="**/*.txt")
    assert result.output.endswith("(stopped looking after visiting 10 entries: narrow the pattern)")
    assert len(result.output.splitlines()) <= 10


def test_list_files_glob_stops_at_its_deadline(project):
    ctx = ToolContext(project_dir=project, call_later=RecordingTimers(fire_at_once=True))
    result = call("list_files", ctx, CodingToolSettings(list_timeout_s=3), path="**/*")
    assert result.output.endswith("(stopped looking after 3 s: narrow the pattern)")


def test_list_files_glob_stops_when_the_session_is_cancelled(project):
    token = CancelToken()

    def call_later(delay, fn):  # the session is stopped just as the walk begins
        token.cancel()
        return lambda: None

    ctx = ToolContext(project_dir=project, cancel=token, call_later=call_later)
    result = call("list_files", ctx, path="**/*")
    assert result.is_error and result.output == "list_files cancelled: **/*"


def test_list_files_glob_lists_symlinks_without_entering_them(ctx, project):
    os.symlink("src", project / "alias")
    os.symlink(".", project / "src" / "self")
    result = call("list_files", ctx, path="**/*")
    assert result.output.splitlines() == ["README.md", "alias", "corvid.db", "src", "src/a.py",
                                          "src/self"]


def test_write_and_edit_keep_working_through_an_in_project_symlink(ctx, project):
    os.symlink("src", project / "alias")
    os.symlink(str(project / "src" / "a.py"), project / "abs.py")
    assert call("write_file", ctx, path="alias/new.py", content="z = 0\n").output.startswith("Created")
    assert (project / "src" / "new.py").read_text() == "z = 0\n"
    assert not call("edit_file", ctx, path="abs.py", old_string="y = 2", new_string="y = 3").is_error
    assert (project / "src" / "a.py").read_text() == "x = 1\ny = 3\nx = 3\n"
    assert call("read_file", ctx, path="alias/../README.md").output == "1\t# demo"
