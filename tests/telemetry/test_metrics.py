"""Prometheus metrics (issue 38 item 2): one scripted session's life, scraped at ``/metrics``.

Given a runtime serving its registry on a loopback port,
When a session calls a tool, crashes and restarts, and is paused by an outage,
Then each family moves as it happens, ``admin stats`` shows the same numbers, and no label
names a session.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corvid_actors.actors.admin import AdminActor, AdminCommand, AdminWiring, Ready
from corvid_actors.config import Config, DaemonConfig
from corvid_actors.errors import ConfigError
from corvid_actors.events import (
    ApprovalRequestEvent,
    ApprovalResolved,
    ErrorEvent,
    Result,
    ToolStatus,
)
from corvid_actors.runtime import Runtime
from corvid_actors.telemetry.metrics import (
    OTHER,
    LabelCap,
    MetricsServer,
    RuntimeMetrics,
    SessionLabels,
)
from corvid_actors.testing import StoreFault, sim_runtime
from corvid_actors.testing.clock import SimClock
from corvid_actors.testing.scripted import ScriptedProvider

CODER = {"agent": "coder", "provider": "scripted", "model": "sim-1"}


@pytest.fixture
def served(sim_clock: SimClock, scripted: ScriptedProvider, tmp_path: Path) -> Iterator[tuple[Runtime, MetricsServer]]:
    (tmp_path / "ws").mkdir()
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws", loop_for_provider={"scripted": "direct"})
    server = MetricsServer(rt.metrics.registry, "127.0.0.1:0")
    try:
        yield rt, server
    finally:
        server.close()
        rt.shutdown()


def scrape(server: MetricsServer) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """``/metrics`` over real HTTP, parsed: (sample name, labels) → value."""
    with urllib.request.urlopen(server.url, timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_each_family_moves_as_a_session_calls_a_tool_crashes_restarts_and_pauses(served, scripted):
    rt, server = served
    agent = rt.create_agent("coder", provider="scripted", model="sim-1")
    # a chat session: its crashes restart with backoff (supervisor.auto_restart_sources)
    sid = rt.create_session(source="chat", participant="alice", agent_id=agent.id).id
    before = scrape(server)
    assert value(before, "corvid_turns_total", **CODER, outcome="success") == 0
    assert value(before, "corvid_slots_capacity") > 0 and value(before, "corvid_slots_in_use") == 0

    # Given a turn that lists files, then answers (with the provider's usage and cost)
    scripted.tool_call("list_files", {"path": "."}, text="Let me look.")
    scripted.reply("Nothing here.", usage={"input_tokens": 120, "output_tokens": 30}, cost_usd=0.25)
    rt.start_process(sid, "what is here?")
    rt.settle()
    asking = scrape(server)  # the tool waits for a person's approval
    assert value(asking, "corvid_approvals_requested_total", kind="tool") == 1
    assert value(asking, "corvid_approvals_pending") == 1
    [request] = rt.list_approvals(sid)
    rt.clock.advance(30)
    rt.resolve_approval(request["id"], "allow")
    rt.settle()
    after_turn = scrape(server)
    assert value(after_turn, "corvid_approvals_pending") == 0
    assert value(after_turn, "corvid_approval_wait_seconds_sum", behavior="allow") == 30
    assert value(after_turn, "corvid_session_starts_total", agent="coder") == 1
    assert value(after_turn, "corvid_turns_total", **CODER, outcome="success") == 1
    assert value(after_turn, "corvid_model_calls_total", **CODER) == 2
    assert value(after_turn, "corvid_tokens_total", **CODER, kind="input_tokens") >= 120
    assert value(after_turn, "corvid_tokens_total", **CODER, kind="output_tokens") >= 30
    assert value(after_turn, "corvid_cost_usd_total", **CODER) == pytest.approx(0.25)
    assert value(after_turn, "corvid_tool_calls_total", tool="list_files", outcome="completed") == 1
    assert value(after_turn, "corvid_tool_call_duration_seconds_count", tool="list_files") == 1
    assert value(after_turn, "corvid_turn_duration_seconds_count", agent="coder") == 1
    assert value(after_turn, "corvid_live_sessions", state="running") == 1
    assert value(after_turn, "corvid_sessions", status="running") == 1

    # When the model server falls over mid-turn: a crash, a restart scheduled, then done 5 s later
    scripted.crash("model server fell over")
    rt.send_message(sid, "again")
    rt.settle()
    crashed = scrape(server)
    assert value(crashed, "corvid_session_crashes_total", agent="coder") == 1
    assert value(crashed, "corvid_session_restarts_total", agent="coder") == 1
    assert value(crashed, "corvid_timers_pending") >= 1  # the restart's backoff
    rt.clock.advance(5)
    assert value(scrape(server), "corvid_session_starts_total", agent="coder") == 2

    # When the upstream is out: the loop retries twice (1 s, 2 s), then the session is
    # paused (no crash, no restart)
    for _ in range(3):
        scripted.outage("connection refused")
    rt.send_message(sid, "are you there?")
    rt.clock.advance(3)
    assert rt.is_paused(sid)
    paused = scrape(server)
    assert value(paused, "corvid_session_outage_pauses_total", agent="coder") == 1
    assert value(paused, "corvid_live_sessions", state="paused") == 1
    assert value(paused, "corvid_sessions", status="paused") == 1
    assert value(paused, "corvid_session_crashes_total", agent="coder") == 1
    assert value(paused, "corvid_session_restarts_total", agent="coder") == 1

    # Then no label anywhere carries the session's id (nor any id-like value)
    assert all(sid not in v for _, labels in paused for _, v in labels)
    assert {k for _, labels in paused for k, _ in labels} <= {
        "agent", "provider", "model", "outcome", "kind", "tool", "state", "status", "scope", "reason", "behavior", "le"}


def test_admin_stats_and_the_scrape_agree(served, scripted):
    rt, server = served
    tree = rt.internals
    admin = AdminActor.start(tree.tracker, AdminWiring(
        supervisor=tree.supervisor, approvals=tree.approvals, bus=tree.bus, timers=tree.timers,
        slot_pool=tree.slot_pool, credits=tree.credits, store=tree.store, providers=tree.providers,
        clock=rt.clock, settings=DaemonConfig(), about={"pid": 1}, metrics=tree.metrics))
    try:
        assert admin.ask(Ready()) is True
        for prompt in ("one", "two"):
            scripted.reply(f"answer {prompt}", usage={"input_tokens": 10, "output_tokens": 5}, cost_usd=0.5)
            rt.start_process(rt.create_session(source="web").id, prompt)
        rt.settle()
        stats: dict[str, Any] = admin.ask(AdminCommand("stats"))
        scraped = scrape(server)
        default = {"agent": "none", "provider": "default", "model": "default"}
        assert stats["metrics"]['corvid_turns_total{agent="none",model="default",outcome="success",provider="default"}'] \
            == value(scraped, "corvid_turns_total", **default, outcome="success") == 2
        assert stats["metrics"]['corvid_cost_usd_total{agent="none",model="default",provider="default"}'] \
            == value(scraped, "corvid_cost_usd_total", **default) == pytest.approx(1.0)
        assert stats["supervisor"]["processes"] == value(scraped, "corvid_live_sessions", state="running") == 2
        assert stats["slots"]["capacity"] == value(scraped, "corvid_slots_capacity")
        assert stats["slots"]["grants"] == value(scraped, "corvid_slot_grants_total")
        assert stats["slots"]["wait_s_total"] == value(scraped, "corvid_slot_wait_seconds_sum")
        assert stats["event_bus"]["global_subscribers"] == value(scraped, "corvid_event_bus_subscribers", scope="global")
        assert stats["sessions_by_status"] == {"running": 2}
        assert stats["metrics"]['corvid_sessions{status="running"}'] == 2
        assert {"admin", "process", "timers"} <= set(stats)  # what stats showed before stays
    finally:
        admin.stop()


def test_agents_past_the_cap_are_counted_as_other():
    cap = LabelCap(2)
    assert [cap(name) for name in ("a", "b", "c", "a", "d", "")] == ["a", "b", OTHER, "a", OTHER, OTHER]
    names = iter(["a", "b", "c", "d"])
    metrics = RuntimeMetrics(labels_of=lambda sid: SessionLabels(next(names), "p", "m"), label_cap=2)
    for sid in ("s1", "s2", "s3", "s4"):
        metrics.on_event(sid, Result(num_turns=1))
    _, samples = metrics.read()
    agents = {key.split('agent="')[1].split('"')[0] for key in samples if key.startswith("corvid_turns_total")}
    assert agents == {"a", "b", OTHER}
    assert samples['corvid_turns_total{agent="other",model="m",outcome="success",provider="p"}'] == 2


def test_tool_names_are_capped_and_approval_waits_are_timed():
    now = [100.0]
    metrics = RuntimeMetrics(monotonic=lambda: now[0], label_cap=1)
    for tool in ("read_file", "mcp_thing_1", "mcp_thing_2"):
        metrics.on_event("s", ToolStatus(tool_name=tool, state="error"))
    metrics.on_event("s", ToolStatus(tool_name="read_file", call_id="c1", state="running"))  # not counted yet
    now[0] += 1.5
    metrics.on_event("s", ToolStatus(tool_name="read_file", call_id="c1", state="completed"))
    metrics.on_event("s", ApprovalRequestEvent(id="ap1", kind="command"))
    _, pending = metrics.read()
    now[0] += 42.0
    metrics.on_event("s", ApprovalResolved(id="ap1", behavior="allow"))
    metrics.on_event("s", ApprovalResolved(id="never-seen", behavior="deny"))
    _, samples = metrics.read()
    assert samples['corvid_tool_calls_total{outcome="error",tool="read_file"}'] == 1
    assert samples['corvid_tool_calls_total{outcome="error",tool="other"}'] == 2
    assert samples['corvid_tool_calls_total{outcome="completed",tool="read_file"}'] == 1
    assert samples['corvid_tool_call_duration_seconds_sum{tool="read_file"}'] == 1.5
    assert samples['corvid_tool_call_duration_seconds_count{tool="read_file"}'] == 1  # the timed one
    assert pending["corvid_approvals_pending"] == 1 and samples["corvid_approvals_pending"] == 0
    assert samples['corvid_approvals_requested_total{kind="command"}'] == 1
    assert samples['corvid_approval_wait_seconds_sum{behavior="allow"}'] == 42.0
    assert 'corvid_approval_wait_seconds_count{behavior="deny"}' not in samples


def test_metrics_listen_must_be_empty_or_host_and_port():
    assert Config().telemetry.metrics_listen == ""
    assert Config().replace(telemetry={"metrics_listen": "127.0.0.1:9464"}).telemetry.metrics_listen == "127.0.0.1:9464"
    with pytest.raises(ConfigError, match="metrics_listen"):
        Config().replace(telemetry={"metrics_listen": "9464"})


def test_a_busy_metrics_address_is_a_config_error_naming_the_key(served):
    rt, server = served
    with pytest.raises(ConfigError, match=r"metrics_listen = '127.0.0.1:\d+': cannot serve /metrics there"):
        MetricsServer(rt.metrics.registry, f"127.0.0.1:{server.port}")


def test_each_runtime_has_its_own_registry(sim_clock, scripted):
    first, second = sim_runtime(sim_clock, scripted), sim_runtime(sim_clock, scripted)
    try:
        assert first.metrics.registry is not second.metrics.registry
        first.start_process(first.create_session(source="web").id, "hi")
        first.settle()
        assert any(k.startswith("corvid_turns_total") for k in first.metrics.read()[1])
        assert not any(k.startswith("corvid_turns_total") for k in second.metrics.read()[1])
    finally:
        first.shutdown()
        second.shutdown()


def test_store_writes_are_timed_and_failed_ones_counted(runtime, recorder):
    sid = runtime.create_session(source="web").id
    runtime.start_process(sid, "hi")
    runtime.settle()
    with StoreFault(runtime, "update_session"):  # the status write of the stop fails once
        runtime.stop_process(sid)
        runtime.settle()
    runtime.clock.advance(60)  # ... and is retried
    assert recorder.last("session_error", sid).error_type == "store_error"
    _, samples = runtime.metrics.read()
    assert samples['corvid_store_write_failures_total{then="retry"}'] == 1
    assert samples["corvid_store_message_commit_seconds_count"] >= 2  # the user's message and the reply
    assert samples["corvid_store_available"] == 1


def test_give_ups_are_counted_by_reason_and_other_errors_are_not():
    metrics = RuntimeMetrics(labels_of=lambda sid: SessionLabels("a", "p", "m"))
    for error_type in ("max_restarts_exceeded", "auto_resume_exhausted", "store_error", "crash"):
        metrics.on_event("s", ErrorEvent(error_type=error_type))
    _, samples = metrics.read()
    assert samples['corvid_session_give_ups_total{agent="a",reason="max_restarts_exceeded"}'] == 1
    assert samples['corvid_session_give_ups_total{agent="a",reason="auto_resume_exhausted"}'] == 1
    assert samples['corvid_store_write_failures_total{then="give_up"}'] == 1
    assert sum(v for k, v in samples.items() if k.startswith("corvid_session_give_ups_total")) == 2


def test_a_subscriber_that_raises_is_counted_and_the_others_still_hear(runtime):
    def broken(session_id, event):
        raise RuntimeError("a subscriber with a bug")

    runtime.subscribe_all(broken)
    runtime.start_process(runtime.create_session(source="web").id, "hi")
    runtime.settle()
    stats, samples = runtime.metrics.read()
    assert stats["event_bus"]["subscriber_errors"] == samples["corvid_event_bus_subscriber_errors_total"] > 0
    assert samples['corvid_turns_total{agent="none",model="default",outcome="success",provider="default"}'] == 1
