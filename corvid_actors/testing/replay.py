"""Record and replay: a journaled session, run again as a deterministic simulation (issue 40).

A runtime with ``[journal] enabled`` (or the agent named in ``[journal] agents``) keeps what
the outside world said to each session (:mod:`corvid_actors.actors.journal`). Here that
journal becomes a test:

- :func:`load_recording` reads one session's journal from a store (a ``Store``, a
  ``Runtime``, or a database URL) as a :class:`Recording`;
- :func:`replay` runs it again on a :func:`~corvid_actors.testing.sim_runtime`: the model
  calls are answered with the recorded responses (chunks, tool calls, usage, errors,
  latencies in simulated time), the tool calls with the recorded results after their
  recorded durations (no command runs), the health probes of an outage with the recorded
  outcomes; the user messages, the approvals (answered as whoever answered them) and the
  actor's crashes (:func:`~corvid_actors.testing.faults.kill_incarnation`, checked to
  fall after the recorded step) come at their recorded times; the first request that
  differs from the recorded one raises :class:`ReplayDivergence` naming the step, and the
  session's events are compared with the recorded ones (types, key fields, times);
- :func:`explore` runs it under N seeded interleavings of the actors' messages and reports
  the seeds whose events break an invariant;
- :func:`export_test` writes a self-contained pytest module doing all that
  (``corvid-actors export-test <session>`` on the command line).

    recording = load_recording(runtime, session_id)
    result = replay(recording)                      # raises ReplayDivergence / AssertionError
    export_test(runtime, session_id, "tests/replays/test_incident_42.py")
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corvid_actors.actors.journal import KEY_FIELDS, QUIET_EVENTS
from corvid_actors.config import Config
from corvid_actors.events import Event
from corvid_actors.testing._recording import EventRow, Recording, load_recording
from corvid_actors.testing._replay_checks import compare_events, invariant_breaches
from corvid_actors.testing._replay_export import export_test, redact_recording
from corvid_actors.testing._replay_script import (
    ReplayDivergence,
    ReplayProvider,
    Script,
    describe_model,
    describe_tool,
    replay_tools,
)
from corvid_actors.testing.clock import SimClock
from corvid_actors.testing.faults import kill_incarnation
from corvid_actors.testing.sim import sim_runtime

__all__ = ["Recording", "ReplayDivergence", "ReplayResult", "ExploreReport", "load_recording", "replay",
           "replay_all", "explore", "export_test", "redact_recording", "DEFAULT_TIME_TOLERANCE_S"]

#: how far (seconds) a replayed event's time may be from the recorded one: a session
#: recorded by a daemon spent real time between events (tool runs, the machine's own
#: pace) that the simulation does not; one recorded in a simulation replays exactly
DEFAULT_TIME_TOLERANCE_S = 1.0
#: simulated seconds the replay runs on after the recording's last entry
RUN_ON_S = 1.0


@dataclass
class ReplayResult:
    """What a replay did: the session's events (``(type, t, key fields)``, times since the
    replay started), the model calls made, and the steps of the recording it used."""

    events: list[EventRow]
    model_calls: int
    steps_used: int
    seed: int | None = None
    raw: list[tuple[float, Event]] = field(default_factory=list)


def _summary(event: Event) -> dict[str, Any]:
    return {name: getattr(event, name, None) for name in KEY_FIELDS.get(event.type, ())}


def replay(recording: Recording | Mapping[str, Any], *, tolerate: bool = False, seed: int | None = None,
           explore: bool = False, check_events: bool = True, time_tolerance_s: float = DEFAULT_TIME_TOLERANCE_S,
           expected_events: Sequence[EventRow] | None = None,
           configure: Callable[[Config], Config] | None = None) -> ReplayResult:
    """Run ``recording`` again in simulated time (see the module docstring).

    Raises :class:`ReplayDivergence` at the first request that differs from the recorded
    one (or when a recorded call is never asked), and ``AssertionError`` when the events
    differ (``check_events``; against ``expected_events`` when given, else the recording's).
    ``tolerate``: accept prompt-only changes (the last user message's text). ``seed`` and
    ``explore``: the inline dispatcher's interleaving (see ``sim_runtime``). ``configure``:
    a change to the recorded config (a test of a new rule)."""
    [result] = replay_all([recording], tolerate=tolerate, seed=seed, explore=explore, check_events=check_events,
                          time_tolerance_s=time_tolerance_s, configure=configure,
                          expected_events=[expected_events] if expected_events is not None else None)
    return result


def replay_all(recordings: Sequence[Recording | Mapping[str, Any]], *, tolerate: bool = False,
               seed: int | None = None, explore: bool = False, check_events: bool = True,
               time_tolerance_s: float = DEFAULT_TIME_TOLERANCE_S,
               expected_events: Sequence[Sequence[EventRow]] | None = None,
               configure: Callable[[Config], Config] | None = None) -> list[ReplayResult]:
    """:func:`replay` of several recordings together, on one simulated runtime (a day of a
    daemon's sessions, say): each session's calls are checked against its own recording,
    its events against its own. The recordings must share a provider and a config (those
    of one daemon); one result per recording, in order."""
    recs = [r if isinstance(r, Recording) else Recording.from_dict(r) for r in recordings]
    if not recs:
        return []
    start = recs[0].start
    for rec in recs[1:]:
        other = rec.start
        if (other.get("provider"), other.get("loop"), other.get("config")) != (
                start.get("provider"), start.get("loop"), start.get("config")):
            raise ValueError(f"session {rec.session_id} was recorded with another provider, loop or config than "
                             f"{recs[0].session_id}: replay them apart")
    clock = SimClock()
    scripts: dict[str, Script] = {}
    provider = ReplayProvider(clock, scripts, name=start.get("provider") or "scripted")
    config = Config().replace(supervisor={"coalesce_deltas": False}).replace(**(start.get("config") or {}))
    config = config.replace(journal={"enabled": False, "agents": []})
    if configure is not None:
        config = configure(config)
    specs = {t["name"]: t for rec in recs for t in rec.start.get("tools") or []}
    tools = replay_tools(list(specs.values()), scripts, clock)
    provider.answer_probes(recs)
    raws: list[list[tuple[float, Event]]] = [[] for _ in recs]
    with tempfile.TemporaryDirectory(prefix="corvid-replay-") as workspace:
        runtime = sim_runtime(clock, provider, config=config, seed=seed, explore=explore, workspace_dir=workspace,
                              loop_for_provider={provider.name: start.get("loop") or "conversation"},
                              tool_registry_factory=lambda: tools, runtime_tools=False)
        try:
            sids = []
            for rec in recs:
                sid = _create_session(runtime, rec.start)
                scripts[sid] = Script(rec.steps, tolerate=tolerate, content=rec.capture_content,
                                      session=rec.session_id if len(recs) > 1 else "")
                sids.append(sid)
            _drive(runtime, clock, recs, sids, raws, scripts)
        finally:
            runtime.shutdown()  # a recording that ended with the runtime's shutdown hears its stop
            clock.close()
    results = []
    for i, (rec, sid, raw) in enumerate(zip(recs, sids, raws, strict=True)):
        script = scripts[sid]
        events = [(e.type, round(at, 6), _summary(e)) for at, e in raw if e.type not in QUIET_EVENTS]
        if script.divergence is not None:
            raise script.divergence
        unused = script.unused
        if unused:
            first = unused[0]
            raise ReplayDivergence(len(script.steps) - len(unused) + 1,
                                   describe_model(first) if first["kind"] == "model" else describe_tool(first),
                                   "nothing more", "the runtime under test never made a recorded call", script.session)
        if check_events:
            try:
                compare_events(expected_events[i] if expected_events is not None else rec.events, events,
                               time_tolerance_s=time_tolerance_s, content=rec.capture_content)
            except AssertionError as exc:
                if len(recs) > 1:
                    raise AssertionError(f"session {rec.session_id}: {exc}") from None
                raise
        results.append(ReplayResult(events, len(provider.requests_for(sid)), script.position, seed, raw))
    return results


def _create_session(runtime: Any, start: Mapping[str, Any]) -> str:
    agent = start.get("agent") or {}
    settings = {k: agent[k] for k in ("kind", "permission_mode", "model", "system_prompt") if agent.get(k)}
    row = runtime.ensure_agent(agent.get("name") or "replayed", **settings)
    return str(runtime.create_session(agent_id=row.id, source=start.get("source") or "web").id)


def _drive(runtime: Any, clock: SimClock, recs: list[Recording], sids: list[str],
           raws: list[list[tuple[float, Event]]], scripts: Mapping[str, Script]) -> None:
    """The recorded user messages, stops, crashes and approvals of every session, at their
    recorded times. A recording that ends with the runtime's shutdown keeps listening: the
    caller shuts down then."""
    t0 = clock.monotonic()
    index = {sid: i for i, sid in enumerate(sids)}
    answers = [[a for a in rec.of("approval") if a.get("asked")] for rec in recs]
    listening = [True]

    def on_event(session_id: str, event: Event) -> None:
        i = index.get(session_id)
        if i is None or not listening[0]:
            return
        raws[i].append((clock.monotonic() - t0, event))
        if event.type == "approval_request" and answers[i]:
            answer = answers[i].pop(0)
            delay = max(float(answer["t"]) - (clock.monotonic() - t0), 0.0)
            approval_id = getattr(event, "id", "")
            behavior = ("allow_session" if answer.get("scope") == "session" else "allow") if answer["allowed"] \
                else "deny"
            clock.call_later(delay, lambda: runtime.resolve_approval(
                approval_id, behavior, answer.get("message") or "", answered_by=answer.get("answered_by") or "library"))

    runtime.subscribe_all(on_event)
    actions: list[tuple[float, int, str, str, Any]] = []  # (t, order, what, session, text or crash)
    end, shutdown_at = 0.0, None
    for rec, sid in zip(recs, sids, strict=True):
        users = rec.of("user")
        if users:
            actions.append((float(users[0]["t"]), len(actions), "start", sid, _text(users[0])))
        else:
            actions.append((0.0, len(actions), "start", sid, ""))
        actions += [(float(u["t"]), len(actions) + i, "send", sid, _text(u))
                    for i, u in enumerate(users[1:]) if not u.get("begin")]
        actions += [(float(c["t"]), len(actions) + i, "crash", sid, (step, c)) for i, (step, c) in enumerate(rec.crashes)]
        events = rec.of("event")
        actions += [(float(e["t"]), len(actions) + i, "stop", sid, "") for i, e in enumerate(events)
                    if e["type"] == "session_stopped" and e.get("reason") == "user_stop"]
        if events and events[-1]["type"] == "session_stopped" and events[-1].get("reason") == "server_shutdown":
            shutdown_at = max(shutdown_at or 0.0, float(events[-1]["t"]))
        end = max(end, rec.end)
    for at, _order, what, sid, text in sorted(actions):
        clock.advance_to(t0 + at)
        if what == "start":
            runtime.start_process(sid, text or None)
        elif what == "send":
            runtime.send_message(sid, text)
        elif what == "crash":
            _crash(runtime, scripts[sid], sid, *text)
        else:
            runtime.stop_process(sid)
    clock.advance_to(t0 + (shutdown_at if shutdown_at is not None else end + RUN_ON_S))
    runtime.settle()
    listening[0] = shutdown_at is not None


def _crash(runtime: Any, script: Script, sid: str, step: int, crash: Mapping[str, Any]) -> None:
    """The recorded actor crash, where the recording has it: after its step, the
    incarnation running; else the divergence (kept in ``script``)."""
    runtime.settle()
    recorded = f"an actor crash after step {step} ({crash.get('error') or 'its error not kept'})"
    if script.divergence is not None:
        return
    if script.position != step:
        script.divergence = ReplayDivergence(script.position + 1, recorded,
                                             f"the crash after step {script.position}",
                                             "the session made another number of calls before it", script.session)
    elif not kill_incarnation(runtime, sid):
        script.divergence = ReplayDivergence(script.position + 1, recorded, "nothing: no incarnation was running "
                                             "to crash", "", script.session)
    runtime.settle()


def _text(user: Mapping[str, Any]) -> str:
    text = user.get("text")
    return text if text is not None else "x" * int(user.get("chars") or 0)


@dataclass
class ExploreReport:
    """Seeds whose interleaving broke an invariant (``failures``: seed → what broke)."""

    seeds: int
    failures: dict[int, str]

    def assert_ok(self) -> None:
        if self.failures:
            lines = "\n".join(f"  seed {seed}: {why}" for seed, why in sorted(self.failures.items()))
            raise AssertionError(f"{len(self.failures)} of {self.seeds} interleavings broke an invariant "
                                 f"(replay one with replay(RECORDING, seed=N, explore=True)):\n{lines}")


def explore(recording: Recording | Mapping[str, Any], seeds: int, *, tolerate: bool = False) -> ExploreReport:
    """Replay under ``seeds`` seeded interleavings (seeds 0 … N-1); each seed's events are
    checked for the invariants: one reply per turn, no event after ``session_stopped``,
    credits never negative, restarts within the backoff."""
    rec = recording if isinstance(recording, Recording) else Recording.from_dict(recording)
    config = Config().replace(**(rec.start.get("config") or {}))
    failures: dict[int, str] = {}
    for seed in range(seeds):
        try:
            result = replay(rec, tolerate=tolerate, seed=seed, explore=True, check_events=False)
        except AssertionError as exc:
            failures[seed] = str(exc)
            continue
        breaches = invariant_breaches(result.raw, rec, config.supervisor)
        if breaches:
            failures[seed] = "; ".join(breaches)
    return ExploreReport(seeds, failures)
