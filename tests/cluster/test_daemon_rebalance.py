"""Rebalancing and ownership history with real daemons (issue 36 items 7 and 8): daemon a
holds every session when daemon b joins; ``admin rebalance`` (asked of b, run on a by
forwarding) moves half of them to b, at no model turn, and ``admin session`` shows where
each ran. Timings as tests/cluster/test_daemon_processes.py; every wait is bounded."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from corvid_actors.daemon.render import show_result
from tests.cluster.conftest import wait_for
from tests.cluster.test_daemon_processes import (
    FAST_CHUNK_DELAY_S,
    conversations,
    launch_daemon,
    owners,
    running_on,
)

pytestmark = pytest.mark.postgres

SESSIONS = 6


def test_admin_rebalance_moves_idle_sessions_to_a_joined_daemon_and_history_shows_it(pg_url: str, tmp_path: Path):
    a = launch_daemon("a", pg_url, tmp_path, chunk_delay_s=FAST_CHUNK_DELAY_S).ready()
    b = None
    try:
        sids = {a.call("start", agent="chatty", prompt="hello", kind="chat")["session"] for _ in range(SESSIONS)}
        replied = wait_for(lambda: conversations(pg_url, sids, complete=True), "a answered every session")
        b = launch_daemon("b", pg_url, tmp_path, chunk_delay_s=FAST_CHUNK_DELAY_S).ready()
        assert set(owners(pg_url).values()) == {"a"}

        result = b.call("rebalance")  # b runs its part (nothing to give), then asks a for a's
        assert result["moved"] == SESSIONS // 2
        assert [(d["daemon_id"], sum(len(s) for s in d["moved"].values())) for d in result["daemons"]] == [
            ("b", 0), ("a", SESSIONS // 2)]
        moved = set(result["daemons"][1]["moved"]["b"])
        wait_for(lambda: running_on(b) == moved, "b runs the sessions a handed over")
        assert running_on(a) == sids - moved
        assert sorted(owners(pg_url).values()) == sorted(["a", "b"] * (SESSIONS // 2))
        time.sleep(2 * 0.2)  # a few of b's heartbeats and sweeps: still no turn
        assert conversations(pg_url, sids) == replied  # the move asked no model anything

        sid = sorted(moved)[0]
        detail = a.call("session", session=sid)  # asked of a, answered by b (the owner)
        assert detail["answered_by"] == "b"
        assert [(o["daemon"], o["epoch"], o["reason_in"], o["reason_out"]) for o in detail["ownership"]] == [
            ("a", 1, "start", "rebalance"), ("b", 2, "rebalance", None)]
        assert detail["ownership"][0]["until"] <= detail["ownership"][1]["since"]
        shown = io.StringIO()
        show_result("session", detail, shown)
        assert "where it ran:" in shown.getvalue()
    finally:
        for daemon in (a, b):
            if daemon is not None:
                daemon.kill()
