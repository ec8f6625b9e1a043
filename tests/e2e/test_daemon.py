"""The daemon as a real subprocess, driven only through the CLI and the admin socket.

``corvid-actors serve --provider stub`` runs the stub Ollama server in the daemon with
slow replies (100 chunks, 0.1 s apart), so sessions stay mid-stream while the tests work on
them; a stub script gives the tool calls that need approval. Every wait is bounded, and
every daemon is killed in teardown whatever happened.
"""

from __future__ import annotations

import io
import json
import os
import pwd
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corvid_actors.daemon import cli
from corvid_actors.daemon.client import AdminClient, AdminRequestFailed, AdminUnavailable
from corvid_actors.db.store import Store

#: an interpreter start plus the runtime's imports on a loaded 2-core machine (~1.5 s typical)
READY_S = 30.0
#: anything the daemon does on request (milliseconds typical)
WAIT_S = 10.0
TOKEN = "s3cret-operator-token"
SLOW_REPLY = " ".join(f"word{i}" for i in range(100))

CONFIG = """
[slots]
max_parallel = 200
[daemon]
stub_reply = "{reply}"
stub_chunks = 100
stub_chunk_delay_s = {delay}
shutdown_timeout_s = {bound}
"""

STUB_SCRIPT = [
    {"match": "please list", "tool_calls": [["list_files", {"path": "."}]]},
    {"match": "please read", "tool_calls": [["read_file", {"path": "notes.txt"}]]},
]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OLLAMA_", "CORVID_"))}


class Daemon:
    """One ``serve`` subprocess; its stderr is read on a thread (so it never blocks on a full pipe)."""

    def __init__(self, data_dir: Path, *, bound_s: float = 20.0, token: str = "", args: tuple[str, ...] = (),
                 detach: bool = False, chunk_delay_s: float = 0.1, env: dict[str, str] | None = None,
                 extra_config: str = "", reply: str = SLOW_REPLY) -> None:
        self.data_dir = data_dir
        self.detach = detach
        self.pid: int | None = None
        self.token = token
        self.config = data_dir.parent / f"{data_dir.name}.toml"
        self.config.write_text(CONFIG.format(reply=reply, bound=bound_s, delay=chunk_delay_s) + extra_config)
        self.extra_env = env or {}
        self.script = data_dir.parent / f"{data_dir.name}-script.json"
        self.script.write_text(json.dumps(STUB_SCRIPT))
        self.args = args
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Daemon:
        if self.detach:
            return self.launch()
        return self.launch().ready()

    def launch(self) -> Daemon:
        """Start the process; without ``detach``, return at once (:meth:`ready` waits)."""
        env = {**_env(), **self.extra_env}
        if self.token:
            env["CORVID_ADMIN_TOKEN"] = self.token
        command = [sys.executable, "-m", "corvid_actors", "serve", "--data-dir", str(self.data_dir), "--provider",
                   "stub", "--config", str(self.config), "--stub-script", str(self.script), *self.args]
        if self.detach:  # returns once the daemon is ready; the daemon is not our child
            started = subprocess.run([*command, "--detach"], env=env, stdin=subprocess.DEVNULL,
                                     capture_output=True, text=True, timeout=READY_S)
            assert started.returncode == 0 and "daemon running: pid" in started.stdout, started
            self.pid = int(started.stdout.split("pid ", 1)[1].split(",", 1)[0])
            return self
        self.proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def ready(self) -> Daemon:
        """Wait (bounded) until the launched daemon says it is ready."""
        self.wait_log("daemon ready", READY_S)
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_log(self, text: str, timeout_s: float = WAIT_S) -> str:
        with self._cond:
            self._cond.wait_for(lambda: self._eof or any(text in line for line in self.lines), timeout_s)
            found = [line for line in self.lines if text in line]
            log = "".join(self.lines[-40:])
        assert found, f"the daemon did not log {text!r} within {timeout_s} s; its log ends:\n{log}"
        return found[0]

    @property
    def socket(self) -> Path:
        return self.data_dir / "admin.sock"

    def client(self, timeout_s: float | None = WAIT_S) -> AdminClient:
        return AdminClient(self.socket, token=self.token, timeout_s=timeout_s).connect()

    def call(self, cmd: str, **args: Any) -> Any:
        if cmd == "start":
            args.setdefault("create", True)  # these tests name a new agent per scenario
        with self.client() as client:
            return client.call(cmd, **args)

    def cli(self, capsys: Any, *argv: str) -> tuple[int, str, str]:
        """The CLI in this process (it only talks to the socket)."""
        capsys.readouterr()
        location = ["--data-dir", str(self.data_dir), "--token", self.token]
        code = cli.main([*argv[:2], *location, *argv[2:]] if argv[0] == "admin" else [*argv, *location])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    def wait_exit(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL, and wait (bounded) until the process is gone."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(WAIT_S)
            return
        if self.pid is None:
            return
        try:
            handle = os.pidfd_open(self.pid)  # readable once the process has exited
        except ProcessLookupError:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
            assert select.select([handle], [], [], WAIT_S)[0], f"pid {self.pid} survived SIGKILL"
            self.pid = None  # never signal that number again: it may be reused
        finally:
            os.close(handle)


class Follower:
    """Collects the daemon's event stream (``follow``) on a thread."""

    def __init__(self, daemon: Daemon, session: str | None = None) -> None:
        self.items: list[dict[str, Any]] = []
        self._by: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (session, type) -> events
        self._cond = threading.Condition()
        self._client = daemon.client(timeout_s=None)
        self._stream = self._client.follow(session)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for item in self._stream:
                with self._cond:
                    self.items.append(item)
                    if "event" in item:
                        self._by.setdefault((item["session_id"], item["event"]["type"]), []).append(item["event"])
                    self._cond.notify_all()
        except AdminUnavailable:
            pass

    def events(self, sid: str, type_: str) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._by.get((sid, type_), ()))

    def wait(self, predicate: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
        with self._cond:
            self._cond.wait_for(lambda: bool(predicate()), timeout_s)
        result = predicate()
        assert result, f"condition not met within {timeout_s} s; got {[i['event']['type'] for i in self.items]}"
        return result

    def close(self) -> None:
        self._client.close()
        self._thread.join(WAIT_S)


@pytest.fixture
def daemons() -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(data_dir: Path, **kwargs: Any) -> Daemon:
        daemon = Daemon(data_dir, **kwargs)
        made.append(daemon)
        return daemon.start()

    yield make
    for daemon in made:
        daemon.kill()


@pytest.fixture(scope="module")
def shared() -> Iterator[Daemon]:
    """One daemon for the functional tests, with a token, in a directory others may traverse
    (so that only the socket's own mode keeps another user out)."""
    base = Path(tempfile.mkdtemp(prefix="corvid-e2e-", dir="/tmp"))
    base.chmod(0o711)
    data_dir = base / "data"
    data_dir.mkdir(mode=0o711)
    data_dir.chmod(0o711)
    daemon = Daemon(data_dir, token=TOKEN)
    try:
        yield daemon.start()
    finally:
        daemon.kill()
        shutil.rmtree(base, ignore_errors=True)


def _stored_sessions(data_dir: Path, ids: list[str]) -> list[Any]:
    store = Store(f"sqlite:///{data_dir / 'corvid.db'}")
    try:
        return [store.get_session(sid) for sid in ids]
    finally:
        store.close()


def _health_once_free(daemon: Daemon) -> dict[str, Any]:
    """``health``, retried while closed connections are still being released (bounded;
    each attempt waits for the daemon's answer, never for a clock)."""
    for _ in range(200):
        try:
            return daemon.call("health")
        except AdminRequestFailed as exc:
            if exc.code != "busy":
                raise
    raise AssertionError("the daemon stayed busy")


# --- list, stop, resume, approve through the CLI ------------------------------------------------


def test_cli_lists_stops_and_resumes_a_running_session(shared, capsys):
    code, out, _ = shared.cli(capsys, "admin", "start", "--agent", "lister", "--create", "--json", "count to a hundred")
    assert code == 0
    sid = json.loads(out)["session"]

    code, out, _ = shared.cli(capsys, "admin", "sessions")
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith(sid[:8])]
    assert "running" in line and "lister" in line

    code, out, _ = shared.cli(capsys, "admin", "stop", sid[:8])
    assert (code, out.strip()) == (0, f"stopped {sid[:8]} (was running)")
    code, out, _ = shared.cli(capsys, "admin", "stop", sid[:8])  # again: says so, publishes nothing
    assert (code, out.strip()) == (0, f"{sid[:8]} was already stopped")
    code, out, _ = shared.cli(capsys, "admin", "session", sid, "--json")
    detail = json.loads(out)
    assert detail["status"] == "stopped"
    assert [e["reason"] for e in detail["events"] if e["type"] == "session_stopped"] == ["user_stop"]

    code, out, _ = shared.cli(capsys, "admin", "resume", sid[:8])
    assert (code, out.strip()) == (0, f"{sid[:8]}: resumed with history")
    code, out, _ = shared.cli(capsys, "admin", "sessions", "--json", "--status", "running")
    assert sid in [row["id"] for row in json.loads(out)]
    code, out, _ = shared.cli(capsys, "admin", "session", sid[:8])
    assert "count to a hundred" in out and "session_started" in out


def test_markup_names_and_a_megabyte_message_from_stdin_through_the_cli(shared, capsys, monkeypatch):
    # issue 14: a session named "[/bad]" crashed `admin sessions` for good; a 1 MB message
    # could not be sent at all, and `admin send ID -` sent a literal "-"
    code, out, _ = shared.cli(capsys, "admin", "start", "--agent", "lister", "--name", "[/bad]", "--json",
                              "see [bold]this[/bold] and [link]")
    assert code == 0
    sid = json.loads(out)["session"]
    code, out, err = shared.cli(capsys, "admin", "sessions")
    assert code == 0 and "[/bad]" in out, err
    code, out, err = shared.cli(capsys, "admin", "session", sid[:8])
    assert code == 0 and "see [bold]this[/bold] and [link]" in out, err

    big = "line of a long message\n" * 45_000  # ~1 MiB
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(big.encode()), encoding="utf-8"))
    code, out, err = shared.cli(capsys, "admin", "send", sid[:8], "-")
    assert code == 0 and out.startswith(f"delivered to {sid[:8]}"), err
    code, out, _ = shared.cli(capsys, "admin", "session", sid, "--json", "--messages", "50")
    assert big.strip() in [m["content"].strip() for m in json.loads(out)["messages"] if m["role"] == "user"]
    shared.call("stop", session=sid)


def test_approvals_are_listed_approved_and_denied_through_the_cli(shared, capsys):
    follower = Follower(shared)
    try:
        listing = shared.call("start", agent="careful", prompt="please list the files")["session"]
        reading = shared.call("start", agent="careful", prompt="please read my notes")["session"]
        [asked_list] = follower.wait(lambda: follower.events(listing, "approval_request"))
        [asked_read] = follower.wait(lambda: follower.events(reading, "approval_request"))

        code, out, _ = shared.cli(capsys, "admin", "approvals")
        assert code == 0 and asked_list["id"] in out and asked_read["id"] in out
        code, out, _ = shared.cli(capsys, "admin", "approvals", "--json", "--session", listing)
        assert [a["tool_name"] for a in json.loads(out)] == ["list_files"]

        code, out, _ = shared.cli(capsys, "admin", "approve", asked_list["id"])
        assert code == 0 and "allow (list_files" in out
        code, out, _ = shared.cli(capsys, "admin", "deny", asked_read["id"], "--message", "not today")
        assert code == 0 and "deny (read_file" in out

        [allowed] = follower.wait(lambda: follower.events(listing, "approval_resolved"))
        [denied] = follower.wait(lambda: follower.events(reading, "approval_resolved"))
        assert (allowed["behavior"], denied["behavior"], denied["message"]) == ("allow", "deny", "not today")
        follower.wait(lambda: [e for e in follower.events(listing, "tool_status") if e["state"] == "completed"])
        code, _, err = shared.cli(capsys, "admin", "approve", asked_list["id"])
        assert code == 1 and "no pending approval" in err
    finally:
        follower.close()


def test_events_follows_one_session_like_tail(shared, capsys):
    # the slow stub streams a delta every 0.1 s, so a follower soon sees two events
    sid = shared.call("start", agent="chatty", prompt="tell me a story")["session"]
    other = shared.call("start", agent="chatty", prompt="and another one")["session"]
    result: dict[str, Any] = {}

    def follow() -> None:
        result["code"] = cli.main(["events", sid[:8], "--json", "--limit", "2", "--data-dir", str(shared.data_dir),
                                   "--token", TOKEN])

    thread = threading.Thread(target=follow)
    thread.start()
    thread.join(WAIT_S)
    assert other != sid and result == {"code": 0}
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 and {line["session_id"] for line in lines} == {sid}


def test_extend_mode_credits_and_stats_over_the_socket(shared):
    sid = shared.call("start", agent="extender", prompt="wait for it")["session"]
    assert shared.call("extend", session=sid, minutes=10)["timeout_s"] == 600  # replaces the deadline
    assert shared.call("mode") == {"mode": "normal"}
    assert shared.call("mode", mode="queued") == {"mode": "queued"}
    assert shared.call("mode", mode="normal") == {"mode": "normal"}
    assert shared.call("credits_grant", participant="alice", amount=75)["balance"] == 75
    balance = shared.call("credits_balance", participant="alice", transactions=5)
    assert balance["balance"] == 75 and [t["amount"] for t in balance["transactions"]] == [75]
    stats = shared.call("stats")
    assert stats["supervisor"]["processes"] >= 1 and stats["process"]["threads"] > 1
    health = shared.call("health")
    assert health["status"] == "ok" and health["daemon"]["stub"] is True
    assert health["providers"]["ollama"]["healthy"] is True
    # which confinement is in force, in both (the CI machine has a working bwrap)
    assert health["daemon"]["sandbox"]["mode"] == "auto" and health["daemon"]["sandbox"]["active"] is True
    assert health["daemon"]["sandbox"]["backend"] == "bwrap"  # bwrap first; Landlock without namespaces
    # the probe's check inside the sandbox: no capability, no nested user namespace, and
    # tmpfs mounts with a size (issue 33)
    assert health["daemon"]["sandbox"]["capabilities"] == "none"
    assert health["daemon"]["sandbox"]["userns"] == "disabled"
    assert health["daemon"]["sandbox"]["tmpfs"] == "sized"
    assert stats["sandbox"] == health["daemon"]["sandbox"]
    assert health["daemon"]["dumpable"] is False  # prctl(PR_SET_DUMPABLE, 0) at start-up


def test_the_daemon_freezes_its_start_up_heap_out_of_the_cyclic_collector(shared):
    # gc.freeze() after start-up: the long-lived start-up objects are never walked again by
    # a full collection (corvid_actors.runtime.lifecycle.freeze_startup_heap)
    assert shared.call("health")["daemon"]["gc_frozen_objects"] > 10_000


def test_a_second_daemon_on_the_same_data_directory_is_refused(shared):
    second = subprocess.run(
        [sys.executable, "-m", "corvid_actors", "serve", "--provider", "stub", "--data-dir", str(shared.data_dir)],
        env=_env(), capture_output=True, text=True, timeout=READY_S,
    )
    assert second.returncode == 1
    assert f"another corvid-actors daemon (pid {shared.proc.pid})" in second.stderr
    assert shared.call("health")["status"] == "ok"


# --- bad input and permissions ------------------------------------------------------------------


BAD_LINES = [
    (b"\x00\xff\xfe garbage\n", "bad_request"),
    (b"not json at all\n", "bad_request"),
    (b"[1, 2, 3]\n", "bad_request"),
    (b"[" * 60000 + b"\n", "bad_request"),
    (json.dumps({"cmd": 5, "token": TOKEN}).encode() + b"\n", "bad_request"),
    (json.dumps({"cmd": "format_disk", "token": TOKEN}).encode() + b"\n", "unknown_command"),
    (json.dumps({"cmd": "stop", "args": {"session": 123}, "token": TOKEN}).encode() + b"\n", "bad_request"),
    (json.dumps({"cmd": "extend", "args": {"session": "abcd", "minutes": "ten"}, "token": TOKEN}).encode() + b"\n",
     "bad_request"),
    (json.dumps({"cmd": "extend", "args": {"session": "abcd", "minutes": -5}, "token": TOKEN}).encode() + b"\n",
     "bad_request"),
    (json.dumps({"cmd": "stop", "args": {}, "token": TOKEN}).encode() + b"\n", "bad_request"),
    (json.dumps({"cmd": "stop", "args": {"session": "zzzz-none"}, "token": TOKEN}).encode() + b"\n", "not_found"),
    (json.dumps({"cmd": "health", "args": [1], "token": TOKEN}).encode() + b"\n", "bad_request"),
    (json.dumps({"cmd": "health", "args": {"x": 1}, "token": TOKEN}).encode() + b"\n", "bad_request"),
    (json.dumps({"cmd": "health"}).encode() + b"\n", "unauthorized"),
    (json.dumps({"cmd": "health", "token": "wrong"}).encode() + b"\n", "unauthorized"),
    (b"x" * 1_000_000 + b"\n", "too_large"),
    # issue 14: each of these raised outside the validator (no reply, a traceback in the log)
    (b'{"cmd": "health", "token": "\\ud800"}\n', "unauthorized"),
    (json.dumps({"cmd": "extend", "args": {"session": "abcd", "minutes": 10**400}, "token": TOKEN}).encode()
     + b"\n", "bad_request"),
    (b'{"cmd": "send", "args": {"session": "abcd", "text": "caf\\udce9"}, "token": "' + TOKEN.encode() + b'"}\n',
     "bad_request"),
    (b'{"cmd": "extend", "args": {"session": "abcd", "minutes": NaN}, "token": "' + TOKEN.encode() + b'"}\n',
     "bad_request"),
]


def test_bad_input_on_the_socket_gets_error_replies_and_the_daemon_keeps_running(shared):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(WAIT_S)
        sock.connect(str(shared.socket))
        replies = sock.makefile("rb")
        for line, code in BAD_LINES:
            sock.sendall(line)
            reply = json.loads(replies.readline())
            assert reply["ok"] is False and reply["error"]["code"] == code, (line[:60], reply)
        # the same connection still works
        sock.sendall(json.dumps({"id": "last", "cmd": "health", "token": TOKEN}).encode() + b"\n")
        reply = json.loads(replies.readline())
        assert (reply["id"], reply["ok"]) == ("last", True)
    assert not [line for line in shared.lines if "Traceback" in line]  # bad input is not a daemon failure

    # clients that vanish mid-request, and more connections than allowed
    for partial in (b'{"cmd": "hea', b"x" * 100_000):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(shared.socket))
            sock.sendall(partial)
    extra = []
    try:
        for _ in range(40):
            extra.append(socket.socket(socket.AF_UNIX))
            extra[-1].connect(str(shared.socket))
        # idle strangers cannot hold the cap: the oldest ones were evicted to make room
        extra[0].settimeout(WAIT_S)
        evicted = json.loads(extra[0].makefile("rb").readline())["error"]
        assert evicted["code"] == "busy" and "evicted" in evicted["message"]
        extra[-1].settimeout(WAIT_S)
        extra[-1].sendall(json.dumps({"id": 1, "cmd": "health", "token": TOKEN}).encode() + b"\n")
        assert json.loads(extra[-1].makefile("rb").readline())["ok"] is True
    finally:
        for sock in extra:
            sock.close()
    assert shared.proc.poll() is None
    assert _health_once_free(shared)["status"] == "ok"


def _connect_as_nobody(path: Path) -> str:
    """Connect from a forked child that became ``nobody``; what it saw, as text."""
    nobody = pwd.getpwnam("nobody")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, try the socket, report through the pipe
        result = "child failed"
        try:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(5)
                try:
                    sock.connect(str(path))
                except PermissionError:
                    result = "EACCES"
                else:
                    try:
                        sock.sendall(b'{"cmd": "health"}\n')
                    except BrokenPipeError:
                        pass  # refused at once: the refusal is already waiting to be read
                    result = sock.makefile("rb").readline().decode()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the test
            result = f"child failed: {exc!r}"
        finally:
            os.write(write_end, result.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        seen = fh.read().decode()
    os.waitpid(pid, 0)
    return seen


def test_the_socket_is_owner_only_and_another_user_cannot_connect(shared):
    mode = stat.S_IMODE(shared.socket.stat().st_mode)
    assert mode == 0o600
    assert stat.S_ISSOCK(shared.socket.stat().st_mode)
    if os.getuid() != 0:
        return  # the bits are the whole story for an unprivileged test run
    assert _connect_as_nobody(shared.socket) == "EACCES"
    # Control: with the file opened up, nobody reaches the daemon, whose peer check refuses it.
    shared.socket.chmod(0o666)
    try:
        seen = _connect_as_nobody(shared.socket)
    finally:
        shared.socket.chmod(0o600)
    assert json.loads(seen)["error"]["code"] == "unauthorized", seen
    assert shared.call("health")["status"] == "ok"


def test_admin_without_a_daemon_says_how_to_start_one(tmp_path, capsys):
    code = cli.main(["admin", "sessions", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and "no corvid-actors daemon is listening" in err and "corvid-actors serve" in err


# --- crash safety and shutdown ---------------------------------------------------------------------


def test_sigkill_mid_session_loses_no_acknowledged_message_and_the_sessions_resume(daemons, tmp_path, capsys):
    data_dir = tmp_path / "data"
    first = daemons(data_dir, detach=True)  # as the README starts it: in the background
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    acknowledged: dict[str, list[str]] = {}
    for i in range(3):
        sid = first.call("start", agent="survivor", prompt=f"task {i}")["session"]
        acknowledged[sid] = [f"task {i}"]
        for j in range(2):
            text = f"note {j} for task {i}"
            assert first.call("send", session=sid, text=text)["delivered"] is True
            acknowledged[sid].append(text)
    first.kill()

    second = daemons(data_dir, args=("--log-format", "json"))
    second.wait_log("resumed 3 session(s)")
    rows = {row["id"]: row for row in second.call("sessions")}
    for sid, texts in acknowledged.items():
        assert rows[sid]["status"] == "running"
        detail = second.call("session", session=sid, messages=50)
        assert [m["content"] for m in detail["messages"] if m["role"] == "user"] == texts
        assert [e["type"] for e in detail["events"]][:1] == ["session_started"]
    started = [json.loads(line) for line in second.lines if '"session started' in line]
    assert {(r["session_id"], r["agent"]) for r in started} == {(s, "survivor") for s in acknowledged}

    # `admin shutdown --wait` returns once the daemon has stopped; the sessions stay marked
    assert second.cli(capsys, "admin", "shutdown", "--wait") == (0, "daemon stopped\n", "")
    assert second.wait_exit(WAIT_S) == 0
    second.wait_log("daemon stopped cleanly")
    rows = _stored_sessions(data_dir, list(acknowledged))
    assert {(r.status, r.restart_pending) for r in rows} == {("stopped", True)}


def test_sigterm_with_50_running_sessions_stops_within_the_bound_and_marks_them_for_resume(daemons, tmp_path):
    bound_s = 10.0
    daemon = daemons(tmp_path / "data", bound_s=bound_s, chunk_delay_s=0.5)  # 100 deltas/s in all
    follower = Follower(daemon)
    with daemon.client() as client:
        for i in range(50):  # pipelined on one connection: answered in order
            client.send("start", agent="worker", prompt=f"job {i}", create=True)
        ids = [client.receive()["result"]["session"] for _ in range(50)]
    follower.wait(lambda: all(follower.events(sid, "content_block_delta") for sid in ids))
    rows = {row["id"]: row for row in daemon.call("sessions", status="running")}
    assert set(ids) <= set(rows) and all(rows[sid]["turns"] == 0 for sid in ids)  # all mid-stream

    started = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    code = daemon.wait_exit(bound_s + 5)
    elapsed = time.monotonic() - started
    assert code == 0 and elapsed < bound_s, (code, elapsed)
    daemon.wait_log("daemon stopped cleanly")
    follower.close()
    stopped = [e["reason"] for sid in ids for e in follower.events(sid, "session_stopped")]
    assert stopped == ["server_shutdown"] * 50
    rows = _stored_sessions(daemon.data_dir, ids)
    assert {(r.status, r.restart_pending) for r in rows} == {("stopped", True)}


# --- run: one session in the foreground -------------------------------------------------------------


def test_run_streams_the_reply_to_the_terminal(tmp_path, capsys):
    config = tmp_path / "fast.toml"
    config.write_text('[daemon]\nstub_reply = "Foreground hello from the stub."\nstub_chunks = 4\n'
                      "stub_chunk_delay_s = 0.0\n")
    code = cli.main(["run", "--agent", "tester", "--create", "--provider", "stub", "--data-dir", str(tmp_path / "data"),
                     "--config", str(config), "say hello"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip() == "Foreground hello from the stub."
    assert "created agent 'tester'" in err
    store = Store(f"sqlite:///{tmp_path / 'data' / 'corvid.db'}")
    try:
        [row] = store.list_sessions()
        assert (row.source, row.status, row.restart_pending) == ("cli", "stopped", False)
        assert store.recent_messages(row.id, 10) == [("user", "say hello"),
                                                     ("assistant", "Foreground hello from the stub.")]
    finally:
        store.close()


def test_run_names_the_setting_to_fix_when_ollama_is_unreachable(tmp_path, capsys, monkeypatch):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("OLLAMA_HOST", f"http://127.0.0.1:{port}")
    code = cli.main(["run", "--agent", "tester", "--create", "--provider", "ollama", "--data-dir",
                     str(tmp_path / "data"), "hello"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"cannot reach Ollama at http://127.0.0.1:{port}" in err and "set OLLAMA_HOST" in err
    assert "Traceback" not in err


# --- restarts spend no model turns (issue 15.1): calls counted on a stub in this process ------------


def _daemon_on(stub: Any, data_dir: Path, made: list[Daemon]) -> Daemon:
    """A daemon whose Ollama is ``stub`` (so the test counts the model calls)."""
    daemon = Daemon(data_dir, args=("--provider", "ollama"))
    daemon.config.write_text(daemon.config.read_text() + f'[providers]\nollama_host = "{stub.url}"\n')
    made.append(daemon)
    return daemon.start()


def _say(daemon: Daemon, sid: str, text: str) -> None:
    """Send ``text`` and wait (bounded) for the turn's result."""
    follower = Follower(daemon, sid)
    try:
        before = len(follower.events(sid, "result"))
        assert daemon.call("send", session=sid, text=text)["delivered"] is True
        follower.wait(lambda: len(follower.events(sid, "result")) > before)
    finally:
        follower.close()


def _user_and_assistant(daemon: Daemon, sid: str) -> list[tuple[str, str]]:
    messages = daemon.call("session", session=sid, messages=50)["messages"]
    return [(m["role"], m["content"]) for m in messages if m["role"] in ("user", "assistant")]


def test_sigterm_and_sigkill_restarts_call_no_model_for_answered_sessions(tmp_path):
    from corvid_actors.testing.ollama_stub import OllamaStubServer

    made: list[Daemon] = []
    data_dir = tmp_path / "data"
    with OllamaStubServer(default_reply="Hi!") as stub:
        try:
            first = _daemon_on(stub, data_dir, made)
            follower = Follower(first)
            sid = first.call("start", agent="greeter", prompt="hello")["session"]
            follower.wait(lambda: follower.events(sid, "result"))
            follower.close()
            assert len(stub.chat_requests) == 1

            first.proc.send_signal(signal.SIGTERM)
            assert first.wait_exit(WAIT_S) == 0
            second = _daemon_on(stub, data_dir, made)
            second.wait_log("resumed 1 session(s)")
            assert second.call("session", session=sid)["status"] == "running"  # back, and ready

            second.kill()  # SIGKILL: the row is left "running"
            third = _daemon_on(stub, data_dir, made)
            third.wait_log("resumed 1 session(s)")
            # the next message is the only model call since the first: a resume that had
            # called the model would show up here as one more request
            _say(third, sid, "how are you?")
            assert len(stub.chat_requests) == 2
            assert _user_and_assistant(third, sid) == [("user", "hello"), ("assistant", "Hi!"),
                                                       ("user", "how are you?"), ("assistant", "Hi!")]
            last = stub.chat_requests[-1].json["messages"][-1]["content"]
            assert "[User]: hello" in last and last.rstrip().endswith("how are you?")
        finally:
            for daemon in made:
                daemon.kill()


def test_sigkill_mid_turn_resumes_only_the_interrupted_session_with_one_call(tmp_path):
    from corvid_actors.testing.ollama_stub import OllamaStubServer

    made: list[Daemon] = []
    data_dir = tmp_path / "data"
    with OllamaStubServer(default_reply="All done.") as stub:  # a complete answer: no nudge
        stub.add_reply(" ".join(["slow"] * 100), chunks=100, delay_s=0.2, match="long job")
        try:
            first = _daemon_on(stub, data_dir, made)
            follower = Follower(first)
            answered = first.call("start", agent="worker", prompt="quick one")["session"]
            follower.wait(lambda: follower.events(answered, "result"))
            busy = first.call("start", agent="worker", prompt="long job")["session"]
            follower.wait(lambda: follower.events(busy, "content_block_delta"))  # mid-stream
            follower.close()
            assert len(stub.chat_requests) == 2
            first.kill()

            second = _daemon_on(stub, data_dir, made)
            second.wait_log("resumed 2 session(s)")
            assert stub.wait_for(lambda: len(stub.chat_requests) >= 3, WAIT_S)
            resumed = stub.chat_requests[2].json["messages"][-1]["content"]
            assert "interrupted" in resumed and "[User]: long job" in resumed
            _say(second, answered, "and another")  # proves no resume call came for `answered`
            assert len(stub.chat_requests) == 4
            assert _user_and_assistant(second, answered) == [
                ("user", "quick one"), ("assistant", "All done."), ("user", "and another"), ("assistant", "All done.")]
        finally:
            for daemon in made:
                daemon.kill()


def test_metrics_listen_serves_the_registry_admin_stats_reads_and_stops_with_the_daemon(daemons, tmp_path, capsys):
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    data_dir = tmp_path / "data"
    daemon = daemons(data_dir, chunk_delay_s=0.0, reply="short",
                     extra_config='[telemetry]\nmetrics_listen = "127.0.0.1:0"\n')
    url = _health_once_free(daemon)["daemon"]["metrics"]
    follower = Follower(daemon)  # `corvid-actors events`: counted among the followers
    sid = daemon.call("start", agent="scraped", prompt="hello")["session"]

    def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urlopen(url, timeout=WAIT_S) as reply:
            text = reply.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    turn = ("corvid_turns_total", (("agent", "scraped"), ("model", "default"), ("outcome", "success"),
                                   ("provider", "default")))
    for _ in range(200):  # the stub answers in milliseconds; each try waits for a real scrape
        if scrape().get(turn):
            break
    samples = scrape()
    assert samples[turn] == 1
    assert samples[("corvid_session_starts_total", (("agent", "scraped"),))] == 1
    stats = daemon.call("stats")
    assert stats["metrics"]['corvid_turns_total{agent="scraped",model="default",outcome="success",provider="default"}'] == 1
    assert stats["sessions_by_status"] == {"running": 1}
    assert samples[("corvid_sessions", (("status", "running"),))] == 1
    assert not any(sid in value for _, labels in samples for _, value in labels)
    assert samples[("corvid_event_followers", ())] == stats["followers"]["followers"] == 1
    assert samples[("corvid_event_follower_dropped_events_total", ())] == 0
    follower.close()

    assert daemon.cli(capsys, "admin", "shutdown", "--wait") == (0, "daemon stopped\n", "")
    assert daemon.wait_exit(WAIT_S) == 0
    with pytest.raises(OSError):  # nothing left listening
        urlopen(url, timeout=WAIT_S)
