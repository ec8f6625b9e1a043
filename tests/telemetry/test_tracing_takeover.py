"""The takeover span (corvid_actors.telemetry.tracing): a daemon that claims a dead daemon's
paused session says so, and what it does next, in a span of its own."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from corvid_actors.testing import Turn
from tests.cluster.conftest import pg_database_url, pg_url, sim_pair  # noqa: F401 - fixtures

pytestmark = pytest.mark.postgres


def test_a_session_taken_over_from_a_dead_daemon_is_a_takeover_span(pg_url):  # noqa: F811 - fixture
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with sim_pair(pg_url, b_tracer_provider=provider) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        sim.a.model.for_session(sid, Turn.outage("503"))
        a.start_process(sid, "hi")
        clock.advance(1)
        assert a.is_paused(sid)
        clock.advance_to(10)
        sim.proxy.partition()  # a is gone; b claims the session once a's lease has expired
        clock.advance_to(60)
        assert b.is_paused(sid)
    [takeover] = [s for s in exporter.get_finished_spans() if s.name == "corvid.session.takeover"]
    assert dict(takeover.attributes) == {"corvid.session.id": sid, "corvid.takeover.then": "pause"}
