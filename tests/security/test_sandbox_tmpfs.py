"""Issue 33, break 7: the sandbox's private tmpfs mounts (``/tmp``, ``$HOME``, the hidden
paths) have a size. Without one, 400 MB written to a command's ``/tmp`` grew the host's
shared memory by 400 MiB for the command's life."""

from __future__ import annotations

import threading
import time

MIB = 1024 * 1024


def shmem_bytes() -> int:
    """The host's shared memory (tmpfs pages included), from /proc/meminfo."""
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Shmem line in /proc/meminfo")


def test_writing_past_the_tmp_limit_fails_and_host_memory_stays_bounded(daemon_factory):
    total = 64 * MIB
    daemon = daemon_factory(settings={"tmpfs_max_bytes": total})
    tmp_limit = total // 2  # /tmp holds half of the total (README "Security model")
    before = shmem_bytes()
    peak: list[int] = []
    ready = daemon.project / "written"

    def watch() -> None:
        # the command holds what it wrote until it ends: the host's shared memory then
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        peak.append(shmem_bytes())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    result = daemon.run("head -c 200000000 /dev/zero > /tmp/big; echo rc=$?; "
                        "echo size=$(stat -c %s /tmp/big); touch written; sleep 1", timeout=30)
    watcher.join(25)
    assert "No space left on device" in result.output, result.output
    [size] = [line for line in result.output.splitlines() if line.startswith("size=")]
    assert int(size[len("size="):]) <= tmp_limit
    assert peak, "the command never signalled that it had written"
    # the host held at most the limit (plus other tenants' noise), not the 200 MB tried
    assert peak[0] - before < tmp_limit + 32 * MIB, (peak[0] - before) / MIB


def test_every_private_tmpfs_is_bounded(daemon_factory):
    total = 64 * MIB
    daemon = daemon_factory(settings={"tmpfs_max_bytes": total})
    result = daemon.run(f"for d in /tmp /var/tmp ~ {daemon.data_dir}; do "
                        "head -c 100000000 /dev/zero > $d/big 2>/dev/null; "
                        "echo $d=$(stat -c %s $d/big); rm -f $d/big; done", timeout=30)
    # ($HOME may not exist for the daemon's user; a data directory under /tmp went with it)
    sizes = {d: size for d, size in (line.split("=", 1) for line in result.output.splitlines()
                                     if "=" in line) if size}
    assert {"/tmp", "/var/tmp"} <= set(sizes), result.output
    assert all(int(size) < total for size in sizes.values()), sizes
    assert sum(int(size) for size in sizes.values()) <= total, sizes


def test_the_split_of_the_total():
    from corvid_actors.tools.sandbox import tmpfs_sizes

    total = 256 * MIB
    four = tmpfs_sizes(["/tmp", "/var/tmp", "/root", "/run/user/0", "/srv/data"], total)
    assert four["/tmp"] == 128 * MIB and four["/srv/data"] == 32 * MIB
    assert sum(four.values()) <= total
    assert tmpfs_sizes(["/tmp"], total) == {"/tmp": total}
    assert tmpfs_sizes(["/var/tmp", "/root"], total) == {"/var/tmp": total // 2, "/root": total // 2}
