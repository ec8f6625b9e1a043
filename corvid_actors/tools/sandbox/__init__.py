"""The OS sandbox every model-chosen program runs in (bubblewrap, or Landlock + seccomp).

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
* no network (a new, empty network namespace, without even the host's loopback) unless
  the caller gives it the host's (``[tools.sandbox] network``, per permission mode:
  :meth:`Sandbox.network_choice`).

What the kernel layer cannot express, the launcher settles after each command
(``_settle``, once every process of the sandbox has ended):

* **New protected files.** A new file with a protected name (``.env.local``) can be
  created in any writable directory; bind mounts protect existing paths only. The
  launcher walks the project again and removes the protected files whose *inode was born
  during the command*: ``statx`` birth time later than a stamp taken, on the same file
  system, just before it started (``_birth``). Never a path, a name, an inode number or a
  modification time: a directory renamed, a file moved back, ``notes.txt`` renamed to
  ``.env.x``, an inode number reused all keep their file. A file that existed before a
  command is never deleted, whatever its name; when newness cannot be proven (no trusted
  birth time: overlayfs, NFS, FUSE) the file is kept, masked from the next command on, and
  the tool's result says so.
* **Masks follow the file.** A masked file cannot be renamed, unlinked or hard-linked
  inside the sandbox (it is a mount point: ``EBUSY``; ``link`` to it crosses mounts:
  ``EXDEV``), but a directory holding one can be renamed, and the file moves with it,
  masked for the rest of that command. The scan before the next command does not enter
  ``mask_skip_dirs``, ``.git`` or masked directories, and anchored patterns follow paths:
  so every masked file, masked directory and ``.git`` is remembered by (device, inode),
  and one the walk after the command no longer finds is searched by inode (the whole
  tree, skipped directories too) and moved back to its old path — or, when that path is
  taken or a component is not a real directory (a symlink the command planted), into
  ``.corvid-restored/N/<old path>``, which every sandbox masks as a whole. After every
  command each protected file is again where the next scan masks it, with no state kept
  between commands (a daemon restart loses nothing).

  Why not walk the skipped directories by name before every command: a names-only walk
  of a 47,000-entry ``node_modules`` costs 60-120 ms, twice per command, and would mask
  the files package managers put there (``certifi``'s ``cacert.pem``, which ``pip`` and
  ``requests`` read). The scan that skips them costs 0.14 ms on the same tree, the birth
  stamp 0.09 ms; the search (75-90 ms there) runs only after a command that moved a
  protected entry out of sight. Protected files that lie in a skipped directory from the
  start stay unmasked (that is what skipping means); new ones made there are not removed.
  Left open: a daemon killed between a command's end and its settling leaves a moved file
  where the command put it; two commands running at once in one project see each
  other's moves only when the first of them ends.

Where namespaces are refused (Docker's default seccomp profile, hardened kernels), the
*Landlock backend* confines a command without them: ``_landlock.py`` builds an allow-list
of paths (the same hidden paths, masks and ``.git`` rules, as far as Landlock can say
them) and ``_confine.py``, a standard-library wrapper, applies no_new_privs, the limits,
Landlock, a capability drop and a seccomp filter in the command's own process, and
supervises its process group (docs/site/concepts/security-model.md says what it cannot do that bwrap
does). :attr:`SandboxStatus.backend` says which one is in force.

``mode`` (``[tools.sandbox] mode``): ``auto`` uses a sandbox when one works — ``backend``
``auto`` tries bwrap, then Landlock — and otherwise runs commands unconfined after one
loud warning per daemon start and per session; ``required`` refuses to run commands
without one; ``off`` never uses one.

Thread-safety: a :class:`Sandbox` is immutable after construction except for its
probe cache (guarded); ``wrap`` may be called from any worker thread.
"""

from corvid_actors.schema.tool_sections import SANDBOX_BACKENDS, SANDBOX_MODES
from corvid_actors.tools.sandbox._cgroups import SessionCgroup
from corvid_actors.tools.sandbox._landlock import probe_landlock
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
from corvid_actors.tools.sandbox._settle import (
    Settlement,
    scan_before_command,
    settle_after_command,
)

__all__ = [
    "SANDBOX_BACKENDS", "SANDBOX_MODES", "Launch", "ProjectScan", "Sandbox", "SandboxSettings",
    "SandboxStatus", "SandboxUnavailable", "SessionCgroup", "Settlement", "current_sandbox",
    "find_bwrap", "isolation_flags", "new_protected_files", "probe_bwrap", "probe_landlock",
    "sandbox_status", "scan_before_command", "scan_project", "settle_after_command", "tmpfs_sizes",
]
