"""A chat bot on the simulated clock with a MemoryTransport (see tests/sim/test_chat_bridge.py)."""

from __future__ import annotations

import pytest

from corvid_actors.chat import ChatBridge, MemoryTransport
from corvid_actors.config import Config
from corvid_actors.testing import sim_runtime

OWNER = "olivia"


def make_bot(sim_clock, scripted, tmp_path, *, direct=False, max_grant=1_000_000):
    cfg = Config().replace(credits={"credits_per_turn": 1, "low_credit_threshold": 3,
                                    "free_credits_on_first_message": 10},
                           daemon={"max_credit_grant": max_grant})
    extra = {"loop_for_provider": {"scripted": "direct"}} if direct else {}
    rt = sim_runtime(sim_clock, scripted, config=cfg, workspace_dir=tmp_path / "ws", with_credits=True,
                     is_owner={OWNER}.__contains__, **extra)
    transport = MemoryTransport()
    bridge = ChatBridge(rt, transport, is_owner={OWNER}.__contains__).start()
    return rt, transport, bridge


@pytest.fixture
def bot(sim_clock, scripted, tmp_path):
    rt, transport, bridge = make_bot(sim_clock, scripted, tmp_path)
    yield rt, transport, bridge
    rt.shutdown()
    bridge.stop()


@pytest.fixture
def tool_bot(sim_clock, scripted, tmp_path):
    rt, transport, bridge = make_bot(sim_clock, scripted, tmp_path, direct=True)
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "notes.txt").write_text("hello\n")
    scripted.tool_call("list_files", {"path": "."})
    scripted.reply("You have notes.txt.")
    yield rt, transport, bridge
    rt.shutdown()
    bridge.stop()


def say(rt, transport, participant, text, **kwargs):
    outcome = transport.say(participant, text, **kwargs)
    rt.settle()
    return outcome
