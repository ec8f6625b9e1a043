"""When an inode was born: the kernel's creation time, the one proof that a file is new.

A path, a name, an inode number, a size or a modification time can all belong to a
file that existed before a command (renamed, moved with its directory, an inode number
reused, ``touch -d``); an inode's birth time (``statx`` ``btime``) is set by the kernel
when the inode is made and no system call changes it. A file is *new* to a command
when its inode was born after a stamp taken before the command started: the birth time
of an unnamed file (``O_TMPFILE``) made in the project, on the same file system, so
both times come from the same clock with the same granularity.

Birth times are trusted only on file systems known to keep them as the inode's own
(ext4, xfs, btrfs, tmpfs, f2fs, bcachefs, zfs): overlayfs gives a file that is renamed
a new upper inode (copy-up), network and FUSE file systems may report anything. Where
there is no trusted birth time, no file is ever proven new.

Python 3.11 has no ``os.statx``: glibc's ``statx`` (2.28+) and ``statfs`` through ctypes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_statx = getattr(_libc, "statx", None)
if _statx is not None:
    _statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    _statx.restype = ctypes.c_int
_statfs = getattr(_libc, "statfs", None)
if _statfs is not None:
    _statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    _statfs.restype = ctypes.c_int

_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_AT_EMPTY_PATH = 0x1000
_STATX_BTIME = 0x800
#: struct statx: stx_mask (u32) at 0, stx_btime {s64 sec, u32 nsec} at 80; 256 bytes
_STATX_SIZE = 256
_BTIME_OFFSET = 80
_STATFS_SIZE = 256

#: statfs f_type of the file systems whose birth times are the inode's own
TRUSTED_BIRTH_FS: frozenset[int] = frozenset({
    0xEF53,        # ext2/3/4
    0x58465342,    # xfs
    0x9123683E,    # btrfs
    0x01021994,    # tmpfs
    0xF2F52010,    # f2fs
    0xCA451A4E,    # bcachefs
    0x2FC12FC1,    # zfs
})

#: (st_dev, birth time in ns) of the stamp taken before a command
Stamp = tuple[int, int]


def _birth(dirfd: int, path: bytes, flags: int) -> int | None:
    if _statx is None:
        return None
    buffer = ctypes.create_string_buffer(_STATX_SIZE)
    if _statx(dirfd, path, flags, _STATX_BTIME, buffer) != 0:
        return None
    (mask,) = struct.unpack_from("I", buffer, 0)
    if not mask & _STATX_BTIME:
        return None
    seconds, nanoseconds = struct.unpack_from("qI", buffer, _BTIME_OFFSET)
    return seconds * 1_000_000_000 + nanoseconds


def birth_ns(path: str) -> int | None:
    """The birth time of ``path`` itself (a symlink is not followed); None if unknown."""
    return _birth(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW)


def fs_type(path: str) -> int | None:
    """The statfs ``f_type`` of the file system holding ``path`` (None if unknown)."""
    if _statfs is None:
        return None
    buffer = ctypes.create_string_buffer(_STATFS_SIZE)
    if _statfs(os.fsencode(path), buffer) != 0:
        return None
    return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF


def creation_stamp(root: str) -> Stamp | None:
    """(device, birth time) of an unnamed file made now in ``root``; None when birth
    times cannot prove anything there (untrusted file system, no ``O_TMPFILE``)."""
    if fs_type(root) not in TRUSTED_BIRTH_FS:
        return None
    try:
        fd = os.open(root, os.O_TMPFILE | os.O_WRONLY, 0o600)
    except OSError:
        return None
    try:
        born = _birth(fd, b"", _AT_EMPTY_PATH)
        return None if born is None else (os.fstat(fd).st_dev, born)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def born_after(path: str, stamp: Stamp | None) -> bool:
    """Whether the inode at ``path`` was provably made after ``stamp`` (same device,
    strictly later birth time): a new file. False whenever in doubt."""
    if stamp is None:
        return False
    try:
        device = os.lstat(path).st_dev
    except OSError:
        return False
    born = birth_ns(path)
    return device == stamp[0] and born is not None and born > stamp[1]
