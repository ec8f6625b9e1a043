"""Platform message ids are remembered in the database: a redelivery is ignored even
after the bot restarts (the replay store's window, ``BridgeSettings.dedupe_window_s``)."""

from __future__ import annotations

from corvid_actors.chat import BridgeSettings, ChatBridge, MemoryTransport
from corvid_actors.testing import SimClock, sim_runtime


def _bot(clock, url, settings=None):
    rt = sim_runtime(clock, store_url=url)
    transport = MemoryTransport()
    return rt, transport, ChatBridge(rt, transport, settings=settings).start()


def test_a_redelivery_after_a_restart_is_still_a_duplicate(tmp_path, sim_clock):
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    rt, transport, bridge = _bot(sim_clock, url)
    try:
        assert transport.say("alice", "hello", message_id="m-1") == "delivered"
        rt.settle()
    finally:
        rt.shutdown()
        bridge.stop()
    sim_clock.close()

    clock = SimClock()
    clock.advance(3600)
    rt, transport, bridge = _bot(clock, url)
    try:
        assert transport.say("alice", "hello", message_id="m-1") == "duplicate"
        assert transport.say("alice", "hello", message_id="m-1", channel="elsewhere") == "delivered"
        rt.settle()
        sid = bridge.conversation("memory", "alice").session_id
        assert [c for r, c in rt.internals.store.recent_messages(sid, 10) if r == "user"] == ["hello"]
    finally:
        rt.shutdown()
        bridge.stop()
        clock.close()


def test_ids_are_forgotten_after_the_window(sim_clock):
    rt, transport, bridge = _bot(sim_clock, "sqlite:///:memory:", BridgeSettings(dedupe_window_s=60))
    try:
        assert transport.say("alice", "one", message_id="m-1") == "delivered"
        rt.settle()
        sim_clock.advance(30)
        assert transport.say("alice", "one", message_id="m-1") == "duplicate"
        sim_clock.advance(31)
        assert transport.say("alice", "one again", message_id="m-1") == "delivered"
        rt.settle()
    finally:
        rt.shutdown()
        bridge.stop()
