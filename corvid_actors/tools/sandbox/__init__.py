"""The OS sandbox every model-chosen program runs in (bubblewrap).

The shell guard (``tools.shell_guard``) is a static reading of a command; a program can
compute names, read ``/proc`` or connect to sockets at run time, so the guard is advice
and the kernel is the wall. :class:`Sandbox` turns a program's argv into a ``bwrap``
command line that gives it:

* no capability (``--cap-drop ALL``: a root daemon's commands otherwise keep every one in
  their user namespace, and could unmount the masks below or remount ``/`` read-write)
  and no nested user namespace (``--disable-userns`` where bwrap has it, ≥ 0.8). The
  probe (``sandbox_status``) runs a check inside a sandbox built with these same flags
  (:func:`isolation_flags`) and calls the sandbox active only if the check holds no
  capability, cannot remount ``/`` and — where bwrap can forbid it — cannot make a user
  namespace; the status says so (``capabilities``, ``userns``);
* new user, PID, IPC, UTS and cgroup namespaces, ``--die-with-parent`` and a fresh
  ``/proc`` of its own PID namespace (no ancestor's ``environ`` is visible). The
  sandbox's init is bwrap itself: when the command ends, or the outer bwrap is killed
  (timeout, cancel, session stop), the whole PID namespace dies — whatever it forked,
  ``setsid``\\ ed or ``nohup``\\ ed;
* the host file system read-only; the project read-write; every ``.git`` inside it
  read-only; every existing protected file (``tools.paths`` patterns, ``.env*`` …)
  masked by an empty read-only file (a protected directory by an empty read-only
  directory); the host's ``/tmp``, ``/var/tmp``, ``$HOME``, ``$XDG_RUNTIME_DIR``, the
  daemon's data directory (database, admin socket) and any configured path replaced by
  empty private tmpfs mounts, each with a size (``--size``, bwrap ≥ 0.10): together at
  most ``tmpfs_max_bytes``, ``/tmp`` half of it and the others the rest in equal shares
  (:func:`tmpfs_sizes`), since tmpfs pages are memory no rlimit counts;
* the environment it is given (the allowlist: ``tools.env.safe_env``) and nothing else;
* resource limits (processes, CPU seconds, file size, address space) set with
  ``prlimit`` inside the namespace; when the daemon runs as root — for whom the kernel
  does not enforce ``RLIMIT_NPROC`` — a pids cgroup (v1 ``pids`` or a writable v2
  hierarchy) bounds the process count instead, when one can be created: one per session
  incarnation (:meth:`Sandbox.session_cgroup`, closed with the incarnation), so the
  limit bounds a session's commands together; a launch without one gets its own. In a
  v1 hierarchy a daemon thread joins the session's cgroup once and starts its commands
  (:meth:`Launch.start`), so they are born inside it without a per-command join;
* no network (a new, empty network namespace) unless the caller allows it.

What the kernel layer cannot express (and :func:`new_protected_files` covers after the
fact): a *new* file with a protected name (``.env.local``) can be created in any
writable directory; bind mounts protect existing paths only. The launcher walks the
project again after the command and removes protected files that were not there
before. A directory that holds a masked file can still be renamed (the file moves
with it, still masked; its content is never readable).

``mode`` (``[tools.sandbox] mode``): ``auto`` uses the sandbox when ``bwrap`` works and
otherwise runs commands unconfined after one loud warning per daemon start and per
session; ``required`` refuses to run commands without it; ``off`` never uses it.

Thread-safety: a :class:`Sandbox` is immutable after construction except for its
probe cache (guarded); ``wrap`` may be called from any worker thread.
"""

from corvid_actors.tool_sections import SANDBOX_MODES
from corvid_actors.tools.sandbox._cgroups import SessionCgroup
from corvid_actors.tools.sandbox._launcher import Launch, Sandbox, current_sandbox, tmpfs_sizes
from corvid_actors.tools.sandbox._probe import (
    SandboxSettings,
    SandboxStatus,
    SandboxUnavailable,
    find_bwrap,
    isolation_flags,
    probe_bwrap,
    sandbox_status,
)
from corvid_actors.tools.sandbox._scan import ProjectScan, new_protected_files, scan_project

__all__ = [
    "SANDBOX_MODES", "Launch", "ProjectScan", "Sandbox", "SandboxSettings", "SandboxStatus",
    "SandboxUnavailable", "SessionCgroup", "current_sandbox", "find_bwrap", "isolation_flags",
    "new_protected_files", "probe_bwrap", "sandbox_status", "scan_project", "tmpfs_sizes",
]
