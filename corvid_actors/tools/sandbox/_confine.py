"""The Landlock backend's exec wrapper: confine this process, then run a command in it.

Run as ``python -I -S <this file> <spec> <argv...>`` by the launcher (the daemon imports
it only for :func:`encode_spec`): it stays standard-library only and imports nothing of the package, nor
``json``, ``re``, ``platform`` or ``signal``, so a command pays the interpreter's start-up
and ``ctypes``, not the package's import time). The daemon
starts it in a new session (``start_new_session=True``); then, without any namespace:

* ``PR_SET_NO_NEW_PRIVS`` and the resource limits (processes, CPU seconds, file size,
  address space), for this process and everything it starts;
* this process stays as the command's *supervisor*: a child subreaper that forks the
  command, waits for it and then SIGKILLs whatever is left of its process group (what
  bwrap's PID namespace does when its init ends). The seccomp filter forbids
  ``setsid`` and ``setpgid``, so nothing can leave the group: the daemon's
  ``killpg`` (timeout, cancel) also reaches every descendant at once;
* in the command's process, before ``exec``: a Landlock ruleset (``spec["rules"]``: the
  paths it may read, or read and write; everything else, such as ``$HOME`` or the
  daemon's data directory, is not granted), TCP bind/connect refused when the network
  is off, and — Landlock ABI ≥ 6 — no signals to and no abstract-socket connections
  with processes outside the sandbox (the supervisor and the daemon included); then,
  as root, every capability dropped (bounding, ambient, effective, permitted,
  inheritable: uid 0 without privileges); then a seccomp filter (:func:`_seccomp_program`).

The spec (:func:`encode_spec` writes it, :func:`decode_spec` reads it: one line per item,
``\\`` and newlines escaped) holds the rules (path, kind), ``network``, ``limits`` {name:
value} and ``env`` {name: value}; kinds: ``ro`` (read, list, execute beneath), ``rw`` (and
write, create, remove, rename beneath), ``list`` (list directories beneath only), ``dev``
(a device file read and written). Exit status: the command's, 128 + N when a signal N ended
it, 126 when confinement failed (the reason on stderr), 127 when the program is missing.
``--probe`` instead of argv: confine a child, exit 0 when every layer took.
"""

from __future__ import annotations

import _signal
import ctypes
import errno
import os
import resource
import struct
import sys

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]

PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2

# Landlock: the same syscall numbers on every architecture
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
MAKE_SYM, REFER, TRUNCATE, IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
#: the oldest ABI used: 3 governs truncate(); 4 adds TCP, 6 signal and abstract-socket scoping
_MIN_ABI = 3
#: the rights a rule on a file (not a directory) may carry
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

# seccomp (linux/seccomp.h, linux/filter.h, linux/audit.h)
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06
_NR, _ARCH = 0, 4
#: every CLONE_NEW* flag (namespaces; CLONE_NEWTIME included)
_CLONE_NEW_ANY = 0x7E020080
_SETID_BITS = 0o6000
AF_INET, AF_INET6, AF_NETLINK = 2, 10, 16

#: (audit arch, syscall numbers by name) of the architectures the filter knows
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "move_mount": 429,
        "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "open_tree_attr": 467, "unshare": 272, "setns": 308,
        "setsid": 112, "setpgid": 109, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "reboot": 169, "swapon": 167,
        "swapoff": 168, "acct": 163, "quotactl": 179, "quotactl_fd": 443, "syslog": 103,
        "keyctl": 250, "add_key": 248, "request_key": 249, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "iopl": 172, "ioperm": 173, "lookup_dcookie": 212,
        "uselib": 134, "vhangup": 153,
        # checked by argument
        "clone": 56, "clone3": 435, "socket": 41, "chmod": 90, "fchmod": 91,
        "fchmodat": 268, "fchmodat2": 452,
    }),
    "aarch64": (0xC00000B7, {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "move_mount": 429,
        "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "open_tree_attr": 467, "unshare": 97, "setns": 268,
        "setsid": 157, "setpgid": 154, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "reboot": 142, "swapon": 224,
        "swapoff": 225, "acct": 89, "quotactl": 60, "quotactl_fd": 443, "syslog": 116,
        "keyctl": 219, "add_key": 217, "request_key": 218, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "lookup_dcookie": 18, "vhangup": 58,
        "clone": 220, "clone3": 435, "socket": 198, "fchmod": 52, "fchmodat": 53,
        "fchmodat2": 452,
    }),
}
_BY_ARGUMENT = ("clone", "clone3", "socket", "chmod", "fchmod", "fchmodat", "fchmodat2")
#: the mode argument's index of each chmod call
_MODE_ARG = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2}


class ConfinementFailed(Exception):
    """A layer could not be applied: the command must not run."""


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise ConfinementFailed(f"{what}: {os.strerror(code)} (errno {code})")
    return result


def _prctl(option: int, arg2: int = 0, arg3: int = 0, what: str = "prctl") -> int:
    return _check(_libc.prctl(option, arg2, arg3, 0, 0), what)


# -- Landlock ---------------------------------------------------------------------------


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or disabled)."""
    version = _libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, int(version))


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: EXECUTE … MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def _kind_rights(kind: str, handled: int) -> int:
    read = EXECUTE | READ_FILE | READ_DIR
    rights = {
        "ro": read,
        "list": READ_DIR,
        "dev": READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV,
        # never device nodes: a command must not make a door to a disk
        "rw": handled & ~(MAKE_CHAR | MAKE_BLOCK),
    }[kind]
    return rights & handled


def apply_landlock(rules: list[list[str]], network: bool) -> int:
    """Restrict this process (and what it starts) to ``rules``; returns the ABI used."""
    abi = landlock_abi()
    if abi < _MIN_ABI:
        raise ConfinementFailed(
            f"Landlock ABI {abi} (at least {_MIN_ABI}, Linux 6.2, is needed: before it "
            "truncate() of a protected file is not governed)" if abi else
            "Landlock is not available in this kernel (or disabled at boot)")
    handled = _fs_rights(abi)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 and not network else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, net, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, net)
    else:
        attr = struct.pack("=Q", handled)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(_libc.syscall(_CREATE_RULESET, buffer, ctypes.c_size_t(len(attr)),
                                   ctypes.c_uint32(0)), "landlock_create_ruleset")
    try:
        for path, kind in rules:
            _add_path_rule(ruleset, path, _kind_rights(kind, handled))
        _check(_libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
               "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def _add_path_rule(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone since the launcher listed it: nothing to grant
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        if not rights:
            return
        attr = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        _check(_libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                             attr, ctypes.c_uint32(0)), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


# -- capabilities -----------------------------------------------------------------------


def drop_capabilities() -> None:
    """Root without privileges: empty bounding, ambient and process capability sets (an
    ``exec`` then grants none: the bounding set is empty and no_new_privs is set)."""
    cap = 0
    while _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0), 8)  # v3, self
    data = ctypes.create_string_buffer(bytes(24), 24)  # two {effective, permitted, inheritable}
    _check(_libc.syscall(126 if os.uname().machine == "x86_64" else 91, header, data), "capset")


# -- seccomp ----------------------------------------------------------------------------


def _stmt(code: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, 0, 0, k & 0xFFFFFFFF)


def _jump(code: int, k: int, jt: int, jf: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _arg_low(index: int) -> int:
    """Offset of the low 32 bits of argument ``index`` in seccomp_data (little-endian)."""
    return 16 + 8 * index


def _seccomp_program(machine: str, network: bool) -> bytes:
    """The filter: EPERM for ptrace, mounts, namespaces (``unshare``, ``setns``, ``clone``
    with a CLONE_NEW* flag; ``clone3`` is ENOSYS, so libc falls back to ``clone``),
    ``setsid``/``setpgid`` (the process group stays whole), kernel keyrings, BPF, perf,
    io_uring (it would bypass this filter), module and kexec loading, handle-based opens
    (``open_by_handle_at`` ignores paths, hence Landlock) and set-uid/set-gid bits;
    ``socket`` only for AF_INET/AF_INET6/AF_NETLINK and only with the network (AF_UNIX:
    never — Landlock does not govern ``connect`` to a socket path, and the admin socket
    must stay out of reach; ``socketpair`` still works); another architecture's calls
    (x32, i386) kill the process."""
    arch, numbers = _ARCHES[machine]
    eperm = _RET_ERRNO | errno.EPERM
    out = [_stmt(_LD_W_ABS, _ARCH), _jump(_JEQ_K, arch, 1, 0), _stmt(_RET_K, _RET_KILL_PROCESS),
           _stmt(_LD_W_ABS, _NR)]
    if machine == "x86_64":  # x32 calls (bit 30) are another ABI: refuse them all
        out += [_jump(0x35, 0x40000000, 0, 1), _stmt(_RET_K, eperm)]  # JGE
    for name, number in numbers.items():
        if name not in _BY_ARGUMENT:
            out += [_jump(_JEQ_K, number, 0, 1), _stmt(_RET_K, eperm)]
    # clone: flags are argument 0 on both architectures
    out += [_jump(_JEQ_K, numbers["clone"], 0, 4), _stmt(_LD_W_ABS, _arg_low(0)),
            _jump(_JSET_K, _CLONE_NEW_ANY, 0, 1), _stmt(_RET_K, eperm),
            _stmt(_RET_K, _RET_ALLOW)]
    out += [_jump(_JEQ_K, numbers["clone3"], 0, 1), _stmt(_RET_K, _RET_ERRNO | errno.ENOSYS)]
    for name, index in _MODE_ARG.items():
        if name in numbers:
            out += [_jump(_JEQ_K, numbers[name], 0, 4), _stmt(_LD_W_ABS, _arg_low(index)),
                    _jump(_JSET_K, _SETID_BITS, 0, 1), _stmt(_RET_K, eperm),
                    _stmt(_RET_K, _RET_ALLOW)]
    families = (AF_INET, AF_INET6, AF_NETLINK) if network else ()
    block = [_stmt(_LD_W_ABS, _arg_low(0))]
    for family in families:
        block.append(_jump(_JEQ_K, family, 0, 1))
        block.append(_stmt(_RET_K, _RET_ALLOW))
    block.append(_stmt(_RET_K, _RET_ERRNO | errno.EAFNOSUPPORT))
    out += [_jump(_JEQ_K, numbers["socket"], 0, len(block)), *block]
    out.append(_stmt(_RET_K, _RET_ALLOW))
    return b"".join(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def apply_seccomp(network: bool) -> None:
    machine = os.uname().machine
    if machine not in _ARCHES:
        raise ConfinementFailed(f"no seccomp filter for the {machine} architecture")
    program = _seccomp_program(machine, network)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0),
           "seccomp filter")


# -- limits, supervision, exec ----------------------------------------------------------

_SIGHUP, _SIGINT, _SIGQUIT, _SIGKILL, _SIGPIPE, _SIGTERM, _SIGXFSZ = 1, 2, 3, 9, 13, 15, 25
_LIMITS = {"nproc": resource.RLIMIT_NPROC, "cpu": resource.RLIMIT_CPU,
           "fsize": resource.RLIMIT_FSIZE, "as": resource.RLIMIT_AS}


def _tasks_of_this_uid() -> int:
    """How many tasks (threads included) this real uid runs now: what RLIMIT_NPROC counts.
    A ``/proc/PID/task`` directory has two links more than the process has threads."""
    uid, count = os.getuid(), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += os.stat(f"/proc/{name}/task").st_nlink - 2
            except OSError:
                continue
    return count


def apply_limits(limits: dict[str, int]) -> None:
    """The resource limits. Without a user namespace RLIMIT_NPROC counts every task of the
    uid — the daemon's own threads too — so ``nproc`` is the headroom above what the uid
    runs now (root is not bound by it: the pids cgroup is)."""
    for name, value in limits.items():
        which = _LIMITS[name]
        if name == "nproc":
            if os.getuid() == 0:
                continue
            value += _tasks_of_this_uid()
        _soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def confine_command(spec: dict) -> None:
    """Every layer of the command's own process, in an order that lets each take."""
    apply_landlock(spec.get("rules", []), bool(spec.get("network")))
    if os.geteuid() == 0:
        drop_capabilities()
    apply_seccomp(bool(spec.get("network")))


def _group_members() -> list[int]:
    """Live processes of this process group other than this one (read from /proc)."""
    me, group = os.getpid(), os.getpgid(0)
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2:].split()
        if int(fields[2]) == group and fields[0] != b"Z":
            members.append(int(name))
    return members


def _end_the_rest() -> None:
    """SIGKILL what is left of the group and reap it (the subreaper inherits orphans)."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        for member in _group_members():
            try:
                os.kill(member, _SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _status_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def supervise(spec: dict, argv: list[str]) -> int:
    """Fork the confined command, wait for it, end the rest of the group; its exit code."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1, what="no_new_privs")
    apply_limits(spec.get("limits", {}))
    _prctl(PR_SET_CHILD_SUBREAPER, 1, what="child subreaper")
    _prctl(PR_SET_DUMPABLE, 0, what="dumpable")
    env = dict(os.environ)
    env.update(spec.get("env", {}))
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:
        os.close(read_end)
        # Python ignores SIGPIPE and SIGXFSZ: the command gets the defaults back
        for number in (_SIGTERM, _SIGINT, _SIGHUP, _SIGQUIT, _SIGPIPE, _SIGXFSZ):
            _signal.signal(number, _signal.SIG_DFL)
        try:
            confine_command(spec)
            if not argv:
                os._exit(0)
            os.execvpe(argv[0], argv, env)
        except ConfinementFailed as exc:
            os.write(write_end, f"126 corvid sandbox (landlock): {exc}".encode())
        except OSError as exc:
            code = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
            os.write(write_end, f"{code} corvid sandbox (landlock): {argv[0]}: "
                                f"{exc.strerror}".encode())
        os._exit(126)
    os.close(write_end)
    # the command's group may be signalled as a whole (timeout(1) without setpgid does):
    # the supervisor outlives such signals to reap the group; the daemon's SIGKILL ends it
    for number in (_SIGTERM, _SIGINT, _SIGHUP, _SIGQUIT):
        _signal.signal(number, _signal.SIG_IGN)
    failure = b""
    while chunk := os.read(read_end, 4096):
        failure += chunk
    os.close(read_end)
    _pid, status = os.waitpid(child, 0)
    _end_the_rest()
    if failure:
        exit_code, _, message = failure.decode("utf-8", "replace").partition(" ")
        sys.stderr.write(message + "\n")
        return int(exit_code)
    return _status_code(status)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, chars = [], iter(text)
    for char in chars:
        if char == "\\":
            char = "\n" if next(chars, "") == "n" else "\\"
        out.append(char)
    return "".join(out)


def encode_spec(rules: list[list[str]], network: bool, limits: dict[str, int],
                env: dict[str, str]) -> str:
    """The spec as one command-line argument (see the module docstring)."""
    lines = [f"net {int(network)}"]
    lines += [f"limit {name} {int(value)}" for name, value in limits.items()]
    lines += [f"env {name} {_escape(value)}" for name, value in env.items()]
    lines += [f"rule {kind} {_escape(path)}" for path, kind in rules]
    return "\n".join(lines)


def decode_spec(text: str) -> dict:
    spec: dict = {"rules": [], "network": False, "limits": {}, "env": {}}
    for line in text.split("\n"):
        key, _, rest = line.partition(" ")
        if key == "net":
            spec["network"] = rest == "1"
        elif key == "limit":
            name, _, value = rest.partition(" ")
            spec["limits"][name] = int(value)
        elif key == "env":
            name, _, value = rest.partition(" ")
            spec["env"][name] = _unescape(value)
        elif key == "rule":
            kind, _, path = rest.partition(" ")
            spec["rules"].append([_unescape(path), kind])
        elif key:
            raise ValueError(f"unknown spec line: {line[:80]!r}")
    return spec


def main(args: list[str]) -> int:
    if not args:
        sys.stderr.write("usage: _confine.py SPEC [--probe | ARGV...]\n")
        return 2
    spec = decode_spec(args[0])
    argv = args[1:]
    if argv == ["--probe"]:
        argv = []
    try:
        return supervise(spec, argv)
    except (ConfinementFailed, OSError, ValueError) as exc:
        sys.stderr.write(f"corvid sandbox (landlock): {exc}\n")
        return 126


if __name__ == "__main__":
    _code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(_code)  # no interpreter finalisation: a command pays for none
