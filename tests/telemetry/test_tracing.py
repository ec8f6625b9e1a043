"""OpenTelemetry spans of a scripted session (corvid_actors.telemetry.tracing): turns, model
calls with the GenAI conventions, tool calls, and the supervisor's decisions, recorded by
the SDK's in-memory exporter through the Runtime's own TracerProvider (no globals)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from corvid_actors.config import Config
from corvid_actors.errors import ConfigError
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.runtime import Runtime
from corvid_actors.telemetry.tracing import Tracing, tracer_provider_from_environment
from corvid_actors.testing import EventRecorder, SimClock, sim_runtime
from corvid_actors.testing.ollama_stub import OllamaStubServer
from corvid_actors.testing.scripted import Turn

MIN = 60.0


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def traced_runtime(sim_clock, scripted, tmp_path, exporter, **kwargs):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws", tracer_provider=provider, **kwargs)


@pytest.fixture
def traced(sim_clock, scripted, tmp_path, exporter):
    rt = traced_runtime(sim_clock, scripted, tmp_path, exporter)
    yield rt
    rt.shutdown()


@pytest.fixture
def tool_runtime(sim_clock, scripted, tmp_path, exporter):
    (tmp_path / "ws").mkdir()
    rt = traced_runtime(sim_clock, scripted, tmp_path, exporter, loop_for_provider={"scripted": "direct"})
    yield rt
    rt.shutdown()


def spans(exporter, name=None) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if name is None or s.name == name]


def one(exporter, name) -> ReadableSpan:
    [span] = spans(exporter, name)
    return span


def parent_of(span: ReadableSpan, candidates: list[ReadableSpan]) -> ReadableSpan | None:
    assert span.parent is not None
    return next((c for c in candidates if c.context.span_id == span.parent.span_id), None)


# --- a turn and its model call --------------------------------------------------------------


def test_a_turn_has_a_span_parenting_its_model_call_with_the_genai_attributes(traced, scripted, exporter):
    agent = traced.create_agent("helper")
    s = traced.create_session(agent_id=agent.id, source="web")
    scripted.reply("Hello there.", usage={"input_tokens": 12, "output_tokens": 3})
    traced.start_process(s.id, "Say hello")
    traced.settle()

    turn = one(exporter, "corvid.turn")
    assert {k: turn.attributes[k] for k in ("corvid.session.id", "corvid.agent.name", "corvid.session.source",
                                            "corvid.turn.number", "corvid.turn.termination_reason")} == {
        "corvid.session.id": s.id, "corvid.agent.name": "helper", "corvid.session.source": "web",
        "corvid.turn.number": 1, "corvid.turn.termination_reason": "success"}
    [call] = [sp for sp in spans(exporter) if sp.attributes.get("gen_ai.operation.name") == "chat"]
    assert call.name == f"chat {call.attributes['gen_ai.request.model']}"
    assert call.attributes["gen_ai.provider.name"] == "scripted"
    assert call.attributes["gen_ai.request.model"]
    assert (call.attributes["gen_ai.usage.input_tokens"], call.attributes["gen_ai.usage.output_tokens"]) == (12, 3)
    assert call.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    # the turn's span parents the model call (made on another message, ended where it streamed)
    assert parent_of(call, [turn]) is turn
    assert call.context.trace_id == turn.context.trace_id
    assert turn.parent is None


def test_each_turn_of_a_session_has_its_own_span_numbered_in_order(traced, scripted, exporter):
    s = traced.create_session(source="web")
    scripted.reply("One.")
    scripted.reply("Two.")
    traced.start_process(s.id, "first")
    traced.settle()
    traced.send_message(s.id, "second")
    traced.settle()
    turns = spans(exporter, "corvid.turn")
    assert [t.attributes["corvid.turn.number"] for t in turns] == [1, 2]
    assert len({t.context.trace_id for t in turns}) == 2  # one trace per turn


def test_a_message_queued_mid_turn_gets_the_next_turn_span_once_the_first_ends(traced, scripted, exporter):
    s = traced.create_session(source="web")  # a task agent: a mid-turn message waits its turn
    scripted.reply("One.", latency_s=10)
    scripted.reply("Two.", latency_s=10)
    traced.start_process(s.id, "first")
    traced.settle()
    traced.clock.advance(5)
    traced.send_message(s.id, "second")
    traced.clock.advance(30)
    first, second = spans(exporter, "corvid.turn")
    assert [t.attributes["corvid.turn.number"] for t in (first, second)] == [1, 2]
    assert [t.attributes["corvid.turn.termination_reason"] for t in (first, second)] == ["success", "success"]
    assert first.end_time <= second.start_time


def test_prompt_and_reply_text_stay_out_of_spans_by_default(traced, scripted, exporter):
    s = traced.create_session(source="web")
    scripted.reply("The secret reply.")
    traced.start_process(s.id, "my secret prompt")
    traced.settle()
    values = [str(v) for sp in spans(exporter) for v in sp.attributes.values()]
    assert spans(exporter)
    assert not any("secret" in v for v in values)
    [call] = [sp for sp in spans(exporter) if sp.attributes.get("gen_ai.operation.name") == "chat"]
    assert "gen_ai.input.messages" not in call.attributes
    assert "gen_ai.output.messages" not in call.attributes


def test_capture_content_puts_the_prompt_and_reply_in_the_model_call_span(sim_clock, scripted, tmp_path,
                                                                          exporter):
    rt = traced_runtime(sim_clock, scripted, tmp_path, exporter, config={"telemetry": {"capture_content": True}})
    try:
        s = rt.create_session(source="web")
        scripted.reply("The secret reply.")
        rt.start_process(s.id, "my secret prompt")
        rt.settle()
    finally:
        rt.shutdown()
    [call] = [sp for sp in spans(exporter) if sp.attributes.get("gen_ai.operation.name") == "chat"]
    assert "my secret prompt" in call.attributes["gen_ai.input.messages"]
    assert "The secret reply." in call.attributes["gen_ai.output.messages"]


def test_a_model_call_streamed_on_a_worker_thread_is_a_child_of_its_turn(sim_clock, scripted, tmp_path,
                                                                          exporter):
    # the threads dispatcher: the scripted call runs on a worker, not on the clock's thread
    rt = traced_runtime(sim_clock, scripted, tmp_path, exporter, dispatcher="threads")
    try:
        s = rt.create_session(source="web")
        scripted.reply("From a worker.", usage={"input_tokens": 5, "output_tokens": 2})
        rt.start_process(s.id, "hi")
        rt.settle()
    finally:
        rt.shutdown()
    turn = one(exporter, "corvid.turn")
    [call] = [sp for sp in spans(exporter) if sp.attributes.get("gen_ai.operation.name") == "chat"]
    assert parent_of(call, [turn]) is turn
    assert call.attributes["gen_ai.usage.output_tokens"] == 2
    assert turn.attributes["corvid.turn.termination_reason"] == "success"


def test_a_model_call_on_the_io_loop_over_the_real_ollama_client_has_the_genai_attributes(tmp_path, exporter):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    clock = SimClock()
    with OllamaStubServer() as stub:
        stub.default_reply = "hello from ollama"
        rt = Runtime(Config(), clock=clock, store_url="sqlite:///:memory:",
                     providers={"ollama": OllamaProvider(stub.url)}, workspace_dir=tmp_path / "ws",
                     tracer_provider=provider)
        try:
            agent = rt.create_agent("local", provider="ollama", model="llama3.1:8b")
            s = rt.create_session(agent_id=agent.id, source="web")
            rt.start_process(s.id, "hi")
            rt.settle()
        finally:
            rt.shutdown()
            clock.close()
    turn = one(exporter, "corvid.turn")
    calls = [sp for sp in spans(exporter) if sp.attributes.get("gen_ai.operation.name") == "chat"]
    assert calls and all(parent_of(c, [turn]) is turn for c in calls)  # the direct loop may call again
    call = calls[0]
    assert call.name == "chat llama3.1:8b"
    assert (call.attributes["gen_ai.provider.name"], call.attributes["gen_ai.request.model"]) == (
        "ollama", "llama3.1:8b")
    assert call.attributes["gen_ai.usage.input_tokens"] > 0 and call.attributes["gen_ai.usage.output_tokens"] > 0
    assert call.attributes["gen_ai.response.finish_reasons"]
    assert parent_of(call, [turn]) is turn


# --- tool calls -----------------------------------------------------------------------------


def test_a_tool_call_is_a_child_of_its_turn_with_approval_sandbox_exit_status_and_duration(tool_runtime,
                                                                                             scripted, exporter):
    agent = tool_runtime.create_agent("builder", permission_mode="full-auto")
    s = tool_runtime.create_session(agent_id=agent.id, source="web")
    scripted.for_session(s.id, Turn.reply("Running it.", tool_calls=[("run_command", {"command": "exit 3"})]),
                         Turn.reply("It exited with 3."))
    tool_runtime.start_process(s.id, "run the check")
    tool_runtime.settle()

    turn = one(exporter, "corvid.turn")
    tool = one(exporter, "execute_tool run_command")
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "run_command"
    assert tool.attributes["corvid.tool.approval"] == "not_required"  # full-auto: nobody was asked
    assert isinstance(tool.attributes["corvid.tool.sandboxed"], bool)
    assert tool.attributes["process.exit.code"] == 3
    assert tool.attributes["corvid.tool.status"] == "error"
    assert tool.attributes["corvid.tool.duration_s"] >= 0.0
    assert tool.status.status_code is StatusCode.ERROR
    assert parent_of(tool, [turn]) is turn
    calls = [sp for sp in spans(exporter) if sp.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(calls) == 2 and all(parent_of(c, [turn]) is turn for c in calls)
    assert turn.attributes["corvid.turn.termination_reason"] == "success"


def test_an_approved_tool_call_says_allow_and_a_denied_one_did_not_run(tool_runtime, scripted, exporter):
    recorder = EventRecorder.attach(tool_runtime)
    s = tool_runtime.create_session(source="web")
    scripted.for_session(s.id, Turn.reply("", tool_calls=[("run_command", {"command": "echo hi"})]),
                         Turn.reply("", tool_calls=[("run_command", {"command": "echo again"})]),
                         Turn.reply("Done."))
    tool_runtime.start_process(s.id, "go")
    tool_runtime.settle()
    tool_runtime.resolve_approval(recorder.last("approval_request", s.id).id, "allow")
    tool_runtime.settle()
    tool_runtime.resolve_approval(recorder.last("approval_request", s.id).id, "deny")
    tool_runtime.settle()

    turn = one(exporter, "corvid.turn")
    ran, denied = spans(exporter, "execute_tool run_command")
    assert (ran.attributes["corvid.tool.approval"], ran.attributes["corvid.tool.status"]) == ("allow", "ok")
    assert ran.attributes["process.exit.code"] == 0
    assert (denied.attributes["corvid.tool.approval"], denied.attributes["corvid.tool.status"]) == ("deny",
                                                                                                   "not_run")
    assert parent_of(ran, [turn]) is turn and parent_of(denied, [turn]) is turn


# --- the supervisor's decisions -------------------------------------------------------------


def decisions(exporter) -> list[tuple[str, dict]]:
    return [(sp.name.removeprefix("corvid.session."), dict(sp.attributes)) for sp in spans(exporter)
            if sp.name.startswith("corvid.session.")]


def test_a_crash_and_its_restart_with_backoff_are_spans(traced, scripted, exporter, chat_session):
    scripted.crash("model server fell over")
    scripted.reply("Back.")
    traced.start_process(chat_session.id, "hi")
    traced.settle()
    traced.clock.advance(5)

    names = [name for name, _ in decisions(exporter)]
    assert names == ["start", "exit", "restart", "start"]
    exit_attrs = decisions(exporter)[1][1]
    assert exit_attrs["corvid.session.id"] == chat_session.id
    assert (exit_attrs["corvid.exit.code"], exit_attrs["corvid.restart.decided"],
            exit_attrs["corvid.restart.attempt"], exit_attrs["corvid.restart.backoff_s"]) == (1, True, 1, 5.0)
    first_turn = spans(exporter, "corvid.turn")[0]
    assert first_turn.attributes["corvid.turn.termination_reason"] == "error"
    assert first_turn.status.status_code is StatusCode.ERROR
    # lifecycle decisions are roots of their own traces
    assert all(sp.parent is None for sp in spans(exporter) if sp.name.startswith("corvid.session."))


def test_an_outage_pause_and_its_automatic_resume_are_spans(traced, scripted, exporter, chat_session):
    scripted.outage("connection refused")
    traced.start_process(chat_session.id, "hi")
    traced.settle()
    pause = dict(decisions(exporter))["pause"]
    assert (pause["corvid.outage.attempt"], pause["corvid.outage.resume_in_s"]) == (1, 5 * MIN)
    turn = one(exporter, "corvid.turn")
    assert turn.attributes["corvid.turn.termination_reason"] == "outage"

    traced.clock.advance(5 * MIN)
    names = [name for name, _ in decisions(exporter)]
    assert names == ["start", "pause", "probe", "resume", "start"]
    assert dict(decisions(exporter))["resume"]["corvid.resume.automatic"] is True


@pytest.fixture
def chat_session(traced):
    return traced.create_session(source="chat", name="chat with alice", participant="alice")


# --- configured by the OTEL_* environment ---------------------------------------------------

OTEL_VARS = ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
             "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME")


@pytest.fixture
def otel_env(monkeypatch):
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_without_otel_variables_the_daemon_keeps_the_no_op_tracer(otel_env):
    assert tracer_provider_from_environment() is None
    otel_env.setenv("OTEL_TRACES_EXPORTER", "none")
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert tracer_provider_from_environment() is None


def test_otel_traces_exporter_gives_an_sdk_provider_named_for_the_service(otel_env):
    otel_env.setenv("OTEL_TRACES_EXPORTER", "console")
    provider = tracer_provider_from_environment()
    try:
        assert isinstance(provider, TracerProvider)
        assert provider.resource.attributes["service.name"] == "corvid-actors"
    finally:
        provider.shutdown()
    otel_env.setenv("OTEL_SERVICE_NAME", "my-agents")
    provider = tracer_provider_from_environment()
    try:
        assert provider.resource.attributes["service.name"] == "my-agents"
    finally:
        provider.shutdown()


def test_an_otlp_endpoint_without_the_otel_extra_is_a_config_error_naming_it(otel_env):
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the OTLP exporter is installed here")
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    with pytest.raises(ConfigError, match=r"corvid-actors\[otel\]"):
        tracer_provider_from_environment()


def test_without_an_sdk_every_span_is_a_no_op():
    tracing = Tracing()  # the global provider: no SDK configured in the tests
    turn = tracing.start_turn(session_id="s", agent="a", source="web", turn=1, generation=1)
    assert not turn.is_recording()
    call = tracing.start_model_call(turn, None, "scripted")
    call.finish(None, None)
    with tracing.tool_call(turn, "run_command", "c1", "not_required") as span:
        assert not span.is_recording()
