"""run_command: a shell command in the project directory, in the OS sandbox when one is
given, with bounded output capture, a time limit through ``ctx.call_later`` and
cancellation (see :mod:`.coding` for the rules every coding tool follows)."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
from collections.abc import Callable
from typing import Any

from corvid_actors.core.vocabulary import ToolResult
from corvid_actors.telemetry.tracing import note_command
from corvid_actors.tools.base import ToolContext
from corvid_actors.tools.coding_base import (
    CodingToolSettings,
    error_result,
    number_arg,
    output_result,
    protected_patterns_of,
    required_arg,
)
from corvid_actors.tools.sandbox import SandboxUnavailable
from corvid_actors.tools.shell_guard import (
    blocked_command,
    protected_write_target,
)


class _Capture:
    """One output stream, bounded: the head and the tail are kept, the middle dropped."""

    def __init__(self, limit: int) -> None:
        self._half = max(1, limit // 2)
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self._half - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        self._tail += chunk
        excess = len(self._tail) - self._half
        if excess > 0:
            del self._tail[:excess]
            self._dropped += excess

    def text(self) -> str:
        dropped = f"\n... [{self._dropped} bytes dropped] ...\n" if self._dropped else ""
        return (self._head.decode("utf-8", "replace") + dropped
                + self._tail.decode("utf-8", "replace"))


def _drain(proc: subprocess.Popen[bytes], settings: CodingToolSettings,
           wake_fd: int | None = None) -> tuple[str, str]:
    """Read stdout and stderr until both reach EOF. ``wake_fd`` gets one byte when the
    command is killed and a second one a grace period later: from then on what is
    already buffered is read and the rest abandoned (a process that left the group, an
    unconfined ``setsid``, may hold the pipes open for ever)."""
    assert proc.stdout is not None and proc.stderr is not None
    captures = {
        proc.stdout.fileno(): _Capture(settings.command_capture_max_bytes),
        proc.stderr.fileno(): _Capture(settings.command_capture_max_bytes),
    }
    with selectors.DefaultSelector() as selector:
        for fd in captures:
            selector.register(fd, selectors.EVENT_READ)
        if wake_fd is not None:
            selector.register(wake_fd, selectors.EVENT_READ)
        wakes = 0
        while any(fd in captures for fd in selector.get_map()):
            ready = selector.select(timeout=0 if wakes >= 2 else None)
            if wakes >= 2 and not ready:
                break
            for key, _ in ready:
                if key.fd == wake_fd:
                    wakes += len(os.read(wake_fd, 2))
                    if wakes >= 2:
                        selector.unregister(wake_fd)
                    continue
                chunk = os.read(key.fd, settings.command_read_chunk_bytes)
                if chunk:
                    captures[key.fd].add(chunk)
                else:
                    selector.unregister(key.fd)
    out, err = captures.values()
    return out.text(), err.text()


def _confinement(ctx: ToolContext, argv: list[str]) -> tuple[Any, list[str], str | None]:
    """(launch or None, argv to run, refusal): the sandbox decides how ``argv`` runs."""
    sandbox = ctx.sandbox
    if sandbox is None or sandbox.status.mode == "off":
        return None, argv, None
    if not sandbox.active:
        if sandbox.status.refuses_commands:
            return None, argv, ("Refused: commands must run in the OS sandbox "
                                "([tools.sandbox] mode = \"required\") and it is unavailable: "
                                f"{sandbox.status.reason}")
        return None, argv, None  # auto: warned once per daemon start and per session
    try:
        launch = sandbox.wrap(argv, project_dir=str(ctx.project_dir), network=ctx.sandbox_network,
                              patterns=protected_patterns_of(ctx), cgroup=ctx.sandbox_cgroup)
    except SandboxUnavailable as exc:
        return None, argv, f"Refused: the command cannot be sandboxed: {exc}"
    return launch, launch.argv, None


def run_command(settings: CodingToolSettings, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    command = required_arg(args, "command")
    requested = number_arg(args, "timeout", integer=False)
    timeout = min(requested or settings.command_timeout_default_s, settings.command_timeout_max_s)
    reason = blocked_command(command, settings.guard)
    if reason is not None:
        return error_result(reason)
    target = protected_write_target(command, ctx.project_dir, protected_patterns_of(ctx), settings.guard)
    if target is not None:
        return error_result(f"Cannot modify protected file: {target} "
                      "(commands may not mention protected paths, even to read them)")
    if ctx.cancel.cancelled:
        return error_result("Command cancelled before it started")
    launch, argv, refusal = _confinement(ctx, [settings.command_shell, "-c", command])
    if refusal is not None:
        return error_result(refusal)
    wake_r, wake_w = os.pipe()
    try:
        def popen() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                argv,
                cwd=os.path.realpath(ctx.project_dir),
                env=dict(ctx.env),  # exactly the allowlisted environment, never os.environ
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, so a kill reaches grandchildren
            )
        # sandboxed: started where it must be born (a session's pids cgroup)
        proc = launch.start(popen) if launch is not None else popen()
    except BaseException:
        os.close(wake_r)
        os.close(wake_w)
        if launch is not None:
            launch.finish(ctx.sandbox, protected_patterns_of(ctx))
        raise
    ended_by: list[str] = []
    give_up: list[Callable[[], None]] = []

    def wake() -> None:
        with contextlib.suppress(OSError):
            os.write(wake_w, b"x")

    def kill(why: str) -> None:
        # sandboxed: the group holds the outer bwrap, whose death ends the PID namespace
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return  # the whole group has already exited: nothing was cut short
        if not ended_by:
            ended_by.append(why)
            wake()
            give_up.append(ctx.call_later(settings.command_kill_grace_s, wake))

    cancel_timer = ctx.call_later(timeout, lambda: kill("timeout"))
    unregister = ctx.cancel.on_cancel(lambda: kill("cancelled"))
    notes: list[str] = []
    try:
        stdout, stderr = _drain(proc, settings, wake_r)
        code = proc.wait()
    finally:
        cancel_timer()
        unregister()
        if proc.poll() is None:  # left by an unexpected error: never leak the group
            kill("error")
            proc.wait()
        for cancel in give_up:
            cancel()  # before the pipe is closed: its number may be reused at once
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
        os.close(wake_r)
        os.close(wake_w)
        if launch is not None:
            notes = launch.finish(ctx.sandbox, protected_patterns_of(ctx))
    note_command(code, sandboxed=launch is not None, ended_by=ended_by[0] if ended_by else "")
    if notes:  # what the sandbox did to the project after the command (_settle)
        stderr = "\n".join([stderr.rstrip("\n"), *notes] if stderr else notes)
    output = stdout + (f"\n[stderr]\n{stderr}" if stderr else "")
    if ended_by and ended_by[0] == "timeout":
        return output_result(f"Command timed out after {timeout:g} s\n{output}".rstrip(), settings, True)
    if ended_by:
        return output_result(f"Command cancelled\n{output}".rstrip(), settings, True)
    if not output:
        output = f"(no output, exit code: {code})"
    if code != 0:
        return output_result(f"Exit code {code}\n{output}", settings, True)
    return output_result(output, settings)
