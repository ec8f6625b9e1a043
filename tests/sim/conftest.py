"""Helpers shared by simulation tests."""

from __future__ import annotations

import pytest

NOISE = ("thinking", "system", "content_block_delta", "context_usage", "message_stop")


@pytest.fixture
def chat_session(runtime):
    return runtime.create_session(source="chat", name="chat with alice", participant="alice")


@pytest.fixture
def web_session(runtime):
    return runtime.create_session(source="web", name="web session")


def lifecycle(recorder, session_id=None):
    """(time, type) of every event but the noisy ones."""
    return [(r.at, r.type) for r in recorder.of(session_id) if r.type not in NOISE]
