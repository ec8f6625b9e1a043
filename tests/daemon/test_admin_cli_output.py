"""How the operator CLI shows things: ids whole on 80 columns, durations labelled as
durations, structured values as JSON, queued approvals without a countdown."""

from __future__ import annotations

import io
import uuid

from corvid_actors.daemon.render import (
    _one_liner,
    describe_event,
    render_table,
    show_approvals,
    show_mapping,
    show_sessions,
)


def session_row(**overrides):
    row = {"id": str(uuid.uuid4()), "name": "a rather long session name that goes on and on and on",
           "status": "running", "agent": "research-assistant-with-a-long-name", "source": "chat",
           "participant": "", "uptime_s": 96.4, "restarts": 0, "paused_until": "2026-01-01T00:05:00.000Z",
           "pending_approvals": 0, "cost_usd": 0.0123, "turns": 3, "restart_pending": False}
    return {**row, **overrides}


def test_ids_and_agent_names_are_never_cut_on_an_80_column_terminal():
    rows = [session_row() for _ in range(3)]
    out = io.StringIO()
    render_table(["ID", "NAME", "AGENT", "DETAIL"],
                 [[r["id"], r["name"], r["agent"], "x" * 200] for r in rows], out, keep=("ID", "AGENT"), width=80)
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    for r in rows:
        assert r["id"] in text and r["agent"] in text  # whole: the other columns shrank instead


def test_sessions_table_keeps_the_id_prefix_and_shows_times_in_utc():
    out = io.StringIO()
    row = session_row()
    show_sessions([row], out)
    text = out.getvalue()
    assert row["id"][:8] in text and "1m36s" in text and "2026-01-01T00:05:00Z" in text


def test_durations_are_labelled_as_durations_and_values_are_json():
    out = io.StringIO()
    show_mapping({"daemon": {"uptime_s": 96.4, "pid": 4242, "shutting_down": False},
                  "slots": {"held": {"abc": 1}}, "models": ["qwen3:8b", None]}, out)
    text = out.getvalue()
    assert "  uptime: 1m36s" in text and "uptime_s" not in text
    assert '    abc: 1' in text and "shutting_down: false" in text
    assert 'models: ["qwen3:8b", null]' in text


def test_event_details_show_tool_inputs_as_json_and_queue_status_text():
    tool = describe_event({"type": "tool_status", "at": "", "tool_name": "read_file", "state": "running",
                           "input": {"path": "README.md", "limit": None}})
    assert '{"path": "README.md", "limit": null}' in tool and "'path'" not in tool
    queued = describe_event({"type": "queue_status", "at": "",
                             "status_message": "Queued — waiting for model slot (need 2, 1/1 in use, position 1)"})
    assert queued.startswith("Queued — waiting for model slot")
    assert describe_event({"type": "queue_status", "at": "", "status_message": ""}) == \
        "no longer waiting for a model slot"
    started = describe_event({"type": "session_started", "at": "", "pid": 800001, "generation": 7})
    assert started == "session started"  # no pseudo-pid, no generation


def test_queued_approvals_show_no_countdown():
    out = io.StringIO()
    base = {"session_id": str(uuid.uuid4()), "tool_name": "run_command", "description": "ls",
            "created_at": "2026-01-01T00:00:01.000Z", "kind": "command"}
    show_approvals([{**base, "id": "ab12cd001", "timeout_s": 55.0},
                    {**base, "id": "ab12cd002", "timeout_s": None}], out)
    lines = out.getvalue().splitlines()
    assert "55s" in lines[1] and "waits for you" in lines[2] and "2026-01-01T00:00:01Z" in lines[1]


def test_extend_says_when_it_capped_the_timeout():
    sid = str(uuid.uuid4())
    assert _one_liner("extend", {"session": sid, "timeout_s": 600.0, "capped": False}) == \
        f"{sid[:8]}: stops in 10m00s unless active again"
    capped = _one_liner("extend", {"session": sid, "timeout_s": 7200.0, "capped": True})
    assert capped.startswith(f"{sid[:8]}: stops in 2h00m") and "capped" in capped
