"""The openat2 binding: symlink-free paths below the fd open; the rest is refused."""

from __future__ import annotations

import errno
import os

import pytest

from corvid_actors.tools.openat2 import openat2, openat2_available


def test_openat2_opens_beneath_and_refuses_symlinks_and_escapes(tmp_path):
    (tmp_path / "project" / "src").mkdir(parents=True)
    (tmp_path / "project" / "src" / "a.py").write_text("x = 1\n")
    os.symlink("src", tmp_path / "project" / "alias")
    root = os.open(tmp_path / "project", os.O_PATH | os.O_DIRECTORY)
    try:
        fd = openat2(root, "src/a.py", os.O_RDONLY, 0)
        if not openat2_available():  # a kernel before 5.6, or a seccomp filter: the walk runs
            assert fd is None
            return
        assert fd is not None
        with os.fdopen(fd) as handle:
            assert handle.read() == "x = 1\n"
        for path, code in (("alias/a.py", errno.ELOOP), ("../project/src/a.py", errno.EXDEV),
                           (str(tmp_path / "project" / "src" / "a.py"), errno.EXDEV)):
            with pytest.raises(OSError) as raised:
                openat2(root, path, os.O_RDONLY, 0)
            assert raised.value.errno == code, path
        assert openat2_available()  # an ordinary refusal does not switch it off
    finally:
        os.close(root)
