"""The ``openat2`` system call (Linux ≥ 5.6) through ctypes, for :mod:`.safe_open`.

Always with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``: the path
is opened only if resolving it neither leaves the directory fd nor meets a symlink.
Where the call is missing (ENOSYS) or a seccomp filter refuses it (EPERM, confirmed by a
probe that must succeed otherwise) it answers None from then on, and the caller walks.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
#: the openat2 syscall number: 437 on every architecture but alpha
_SYS_OPENAT2 = 547 if platform.machine().startswith("alpha") else 437
_CLOEXEC = os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


class _Openat2:
    """openat2 through libc's ``syscall``; switched off for the process on ENOSYS/EPERM."""

    def __init__(self) -> None:
        self.available = platform.system() == "Linux"
        self._syscall = None
        if self.available:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                self._syscall = libc.syscall
                self._syscall.restype = ctypes.c_long
            except (OSError, AttributeError):
                self.available = False

    def __call__(self, dir_fd: int, path: str, flags: int, mode: int) -> int | None:
        """The fd, or None when openat2 cannot be used here (then never tried again);
        OSError for any other failure."""
        if not self.available or self._syscall is None:
            return None
        how = _OpenHow(flags | _CLOEXEC, mode if flags & os.O_CREAT else 0,
                       RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
        fd, code = self._call(dir_fd, path, how)
        if fd >= 0:
            return fd
        if code == errno.EPERM:  # a seccomp filter, or this file (immutable, O_NOATIME…)?
            probe, probe_code = self._call(dir_fd, ".", _OpenHow(os.O_PATH | _CLOEXEC, 0, 0))
            if probe >= 0:
                os.close(probe)
                raise OSError(code, os.strerror(code), path)
            code = probe_code
        if code in (errno.ENOSYS, errno.EPERM):  # an old kernel, or a seccomp filter
            self.available = False
            return None
        raise OSError(code, os.strerror(code), path)

    def _call(self, dir_fd: int, path: str, how: _OpenHow) -> tuple[int, int]:
        assert self._syscall is not None
        fd = self._syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd),
                           ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                           ctypes.c_size_t(ctypes.sizeof(how)))
        return int(fd), (0 if fd >= 0 else ctypes.get_errno())


#: the process's openat2 (ENOSYS or a seccomp EPERM switches it off for good)
openat2 = _Openat2()


def openat2_available() -> bool:
    """Whether this process opens symlink-free paths with openat2 (until ENOSYS/EPERM)."""
    return openat2.available
