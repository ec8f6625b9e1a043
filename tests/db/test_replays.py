"""The replay store: a key is used once until it expires, across store reopenings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corvid_actors.db.replays import MemoryReplayStore, ReplayStore
from corvid_actors.db.store import Store

from .conftest import run_together

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["db", "memory"])
def replays(request, store: Store):
    return ReplayStore(store) if request.param == "db" else MemoryReplayStore()


def test_a_key_is_used_once_until_it_expires(replays):
    until = T0 + timedelta(seconds=300)
    assert replays.first_use("sig-a", now=T0, expires_at=until)
    assert not replays.first_use("sig-a", now=T0 + timedelta(seconds=299), expires_at=until)
    assert replays.first_use("sig-b", now=T0, expires_at=until)
    # after expiry the key is pruned (its timestamp is out of the window by then anyway)
    assert replays.first_use("sig-a", now=T0 + timedelta(seconds=301), expires_at=until + timedelta(seconds=301))


def test_forget_lets_a_key_be_used_again(replays):
    until = T0 + timedelta(seconds=300)
    assert replays.first_use("sig-a", now=T0, expires_at=until)
    replays.forget("sig-a")
    assert replays.first_use("sig-a", now=T0, expires_at=until)


def test_keys_survive_reopening_the_database(tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    first = Store(url)
    assert ReplayStore(first).first_use("sig-a", now=T0, expires_at=T0 + timedelta(seconds=300))
    first.close()
    second = Store(url)
    try:
        assert not ReplayStore(second).first_use("sig-a", now=T0 + timedelta(seconds=10),
                                                 expires_at=T0 + timedelta(seconds=300))
    finally:
        second.close()


def test_concurrent_first_uses_accept_exactly_one(tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    stores = [Store(url) for _ in range(4)]
    results: list[bool] = []
    try:
        errors = run_together([lambda s=s: results.append(ReplayStore(s).first_use(
            "sig-x", now=T0, expires_at=T0 + timedelta(seconds=300))) for s in stores])
        assert errors == []
        assert sorted(results) == [False, False, False, True]
    finally:
        for s in stores:
            s.close()
