"""Chaos: sessions against the stub servers under random faults; then every invariant holds.

60 sessions by default (the README's test command stays fast), 200 under ``--chaos-full``
(or ``--full``; see tests/conftest.py). The scenario's density does not depend on its
size: each round messages a tenth of the sessions and stops a twenty-fifth of them, so
the bounded run is the full one scaled down, not a lighter one.

Faults, drawn from the seed (see conftest): HTTP 500/503/429 (Ollama) and 429/500/529
(Anthropic), connections dropped mid-stream, in-stream error events, malformed tool
arguments, tool timeouts (a real subprocess killed), sessions stopped at random moments
(mid-stream included), exceptions on session actors, and a subscriber that raises.
Supervision runs on the simulated clock (retries, restarts, outages, idle timeouts);
HTTP and tools run in real time on 127.0.0.1.

Afterwards: every session is in a defined state, no slot is in use, no approval is
pending, no thread is left behind, every acknowledged user message is in the database,
and each session's event log is well-formed.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from corvid_actors.config import Config
from corvid_actors.providers.anthropic import AnthropicProvider
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.runtime import Runtime
from corvid_actors.testing import EventRecorder, SimClock
from corvid_actors.testing.anthropic_stub import AnthropicStubServer
from corvid_actors.testing.ollama_stub import OllamaStubServer, Turn
from corvid_actors.wiring.loop_factories import direct_loop, sdk_loop
from tests.chaos.conftest import CRASH_AT_START, CRASH_ON_REPLY, chaotic, check_event_log

FULL_SESSIONS = 200
BOUNDED_SESSIONS = 60
ROUNDS = 10
#: per round, the share of the sessions sent a message, and of those (and of all) stopped
MESSAGED_SHARE = 10
STOPPED_SHARE = 50
OLLAMA_MODEL = "llama3.1:8b"
ANTHROPIC_MODEL = "claude-sonnet-4-6"
API_KEY = "chaos-key"
#: real seconds: a slow stream lasts ~0.1 s, a reply ~35 ms, a tool timeout 0.2 s. Sessions
#: waiting on an approval keep their slot, so most calls of the first settle stream one
#: after another: at 0.01 s a chunk that settle alone took ~7 s of the test's ~10 (stops
#: still land mid-stream as often: 2 streams cut with the default seed at either delay)
CHUNK_DELAY_S = 0.003
TOOL_TIMEOUT_S = 0.2
SETTLE_S = 60.0
THREAD_EXIT_S = 5.0
#: threads the runtime documents as process-wide (the real-time I/O clock for tool deadlines)
PROCESS_WIDE_THREADS = frozenset({"corvid-clock"})
OLLAMA_FAULTS = ("http_500", "http_503", "http_429", "drop", "bad_args", "tool_timeout", "slow", "reply")
ANTHROPIC_FAULTS = ("http_429", "http_500", "http_529", "drop", "stream_error", "bad_json", "slow", "reply")
ACTOR_FAULTS = (CRASH_AT_START, CRASH_ON_REPLY)
#: faults the loops retry (three in a row are an outage: the session pauses)
RETRYABLE_FAULTS = {"ollama": ("http_500", "http_503", "http_429", "drop"),
                    "anthropic": ("http_429", "http_500", "http_529", "drop", "stream_error")}
#: faults that make the model call a tool
TOOL_FAULTS = {"ollama": ("bad_args", "tool_timeout"), "anthropic": ("bad_json",)}
#: sessions that carry each ingredient of the scenario at least (see ``ensure_coverage``)
MIN_EACH = 3


@dataclass
class Plan:
    """What one session meets: its provider, mode, source and the faults of its first calls."""

    tag: str
    provider: str
    source: str
    mode: str
    faults: list[str]
    actor_fault: str = ""
    raising_subscriber: bool = False
    sid: str = ""
    acked: list[str] = field(default_factory=list)


class OllamaScript:
    """The Ollama stub's responder: each session's calls get its planned faults in order."""

    def __init__(self, plans: dict[str, Plan]) -> None:
        self._plans = plans
        self._calls: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn | None:
        text = " ".join(str(m.get("content", "")) for m in body.get("messages") or [])
        tag = next((t for t in self._plans if t in text), None)
        if tag is None:
            return None
        with self._lock:
            index = self._calls[tag]
            self._calls[tag] += 1
        faults = self._plans[tag].faults
        kind = faults[index] if index < len(faults) else "reply"
        words = " ".join(f"w{i}" for i in range(30))
        return {
            "http_500": Turn(fault="http_500"),
            "http_503": Turn(fault="http_503"),
            "http_429": Turn(fault="http_429"),
            "drop": Turn(text=words, fault="drop_mid_stream", after_chunks=3),
            "bad_args": Turn(tool_calls=[("read_file", {"offset": "not-a-number"})]),
            "tool_timeout": Turn(tool_calls=[("run_command", {"command": "sleep 5",
                                                               "timeout": TOOL_TIMEOUT_S})]),
            "slow": Turn(text=f"slow answer {tag} {words}", delay_s=CHUNK_DELAY_S),
        }.get(kind, Turn(text=f"answer for {tag} {words}", chunks=10, delay_s=CHUNK_DELAY_S))


def script_anthropic(stub: AnthropicStubServer, plan: Plan) -> None:
    words = " ".join(f"w{i}" for i in range(30))
    for kind in plan.faults:
        if kind in ("http_429", "http_500", "http_529"):
            stub.add_fault(kind, retry_after_ms=1, match=plan.tag)
        elif kind == "drop":
            stub.add_fault("drop", after_events=4, text=words, match=plan.tag)
        elif kind == "stream_error":
            stub.add_fault("stream_error", after_events=3, text=words, match=plan.tag)
        elif kind == "bad_json":
            stub.add_raw_tool_use("read_file", ['{"path": "READ', "ME.md"], match=plan.tag)
        elif kind == "slow":
            stub.add_fault("slow", text=f"slow answer {words}", delay_s=CHUNK_DELAY_S, match=plan.tag)
        else:
            stub.add_reply(f"answer for {plan.tag}", match=plan.tag)


def make_plans(rng: random.Random, sessions: int) -> list[Plan]:
    plans = []
    for i in range(sessions):
        provider = "ollama" if rng.random() < 0.7 else "anthropic"
        pool = OLLAMA_FAULTS if provider == "ollama" else ANTHROPIC_FAULTS
        plans.append(Plan(
            tag=f"[chaos-{i:03d}]", provider=provider,
            source="chat" if rng.random() < 0.5 else "web",
            mode="default" if rng.random() < 0.2 else "full-auto",
            faults=[rng.choice(pool) for _ in range(rng.randint(0, 3))],
            actor_fault=rng.choice(ACTOR_FAULTS) if rng.random() < 0.08 else "",
            raising_subscriber=rng.random() < 0.05,
        ))
    return plans


def _outage(plan: Plan) -> bool:
    return len(plan.faults) >= 3 and all(f in RETRYABLE_FAULTS[plan.provider] for f in plan.faults[:3])


def _approval(plan: Plan) -> bool:
    return plan.mode == "default" and any(f in TOOL_FAULTS[plan.provider] for f in plan.faults)


def _restart(plan: Plan) -> bool:
    return plan.source == "chat" and bool(plan.actor_fault)


def _give_outage(plan: Plan, rng: random.Random) -> None:
    plan.faults = [rng.choice(RETRYABLE_FAULTS[plan.provider]) for _ in range(3)]


def _give_approval(plan: Plan, rng: random.Random) -> None:
    plan.mode = "default"
    plan.faults.insert(0, rng.choice(TOOL_FAULTS[plan.provider]))


def _give_restart(plan: Plan, rng: random.Random) -> None:
    plan.source = "chat"
    plan.actor_fault = rng.choice(ACTOR_FAULTS)


#: what the scenario must hold for every kind of event checked at the end to be possible
#: (an outage pauses and retries, an approval is asked for a tool, an actor crash in a chat
#: session restarts it), and how a plan is given it
INGREDIENTS = ((_outage, _give_outage), (_approval, _give_approval), (_restart, _give_restart))


def ensure_coverage(plans: list[Plan], rng: random.Random) -> int:
    """Give ``MIN_EACH`` plans each ingredient the draw left short of it; returns how many
    plans were changed. Small scenarios can miss one by chance; the 200-session one with
    the default seed has them all, so it is drawn as it always was (no random numbers
    are taken when nothing is short)."""
    changed = 0
    for has, give in INGREDIENTS:
        short = MIN_EACH - sum(1 for p in plans if has(p))
        if short <= 0:
            continue
        spare = [p for p in plans if not p.actor_fault and not any(h(p) for h, _ in INGREDIENTS)]
        for plan in rng.sample(spare, min(short, len(spare))):
            give(plan, rng)
            changed += 1
    return changed


def raising_subscriber(session_id: str, event: Any) -> None:
    raise RuntimeError("a subscriber that fails on every event")


class Chaos:
    """Drives the scenario; keeps what was acknowledged to whom."""

    def __init__(self, runtime: Runtime, clock: SimClock, plans: list[Plan], rng: random.Random) -> None:
        self.runtime, self.clock, self.plans, self.rng = runtime, clock, plans, rng
        self.messages = 0
        self.stops = 0

    def prompt(self, plan: Plan, *, first: bool) -> str:
        self.messages += 1
        marker = plan.actor_fault if first else ""
        return f"{plan.tag} message {self.messages} {marker}".strip()

    def start_all(self) -> None:
        for plan in self.plans:
            text = self.prompt(plan, first=True)
            self.runtime.start_process(plan.sid, text)  # persisted before it returns
            plan.acked.append(text)

    def round(self) -> None:
        """Between two clock advances: messages, random stops (some of sessions just sent a
        message: mid-stream or waiting for a slot) and approval answers."""
        sent = self.rng.sample(self.plans, max(1, len(self.plans) // MESSAGED_SHARE))
        for plan in sent:
            text = self.prompt(plan, first=False)
            if self.runtime.send_message(plan.sid, text):
                plan.acked.append(text)
            elif not self.runtime.is_paused(plan.sid):
                self.runtime.resume_process(plan.sid, text)  # persisted before it starts
                plan.acked.append(text)
        stops = max(1, len(self.plans) // STOPPED_SHARE)
        for plan in self.rng.sample(sent, stops) + self.rng.sample(self.plans, stops):
            self.runtime.stop_process(plan.sid, "chaos_stop")
            self.stops += 1
        for approval in self.runtime.list_approvals():
            roll = self.rng.random()
            if roll < 0.4:
                self.runtime.resolve_approval(approval["id"], "allow")
            elif roll < 0.7:
                self.runtime.resolve_approval(approval["id"], "deny")
            # else: left to time out

    def advance(self, seconds: float) -> None:
        self.runtime.settle(SETTLE_S)
        self.clock.advance(seconds)
        self.runtime.settle(SETTLE_S)


def test_sessions_under_random_faults_end_consistent(seed, chaos_full, tmp_path):
    rng = random.Random(seed)
    threads_before = set(threading.enumerate())
    plans = make_plans(rng, FULL_SESSIONS if chaos_full else BOUNDED_SESSIONS)
    topped_up = ensure_coverage(plans, rng)
    by_tag = {p.tag: p for p in plans}
    ollama_stub = OllamaStubServer(responder=OllamaScript(by_tag)).start()
    anthropic_stub = AnthropicStubServer(api_key=API_KEY).start()
    clock = SimClock()
    project_dir = tmp_path / "project"
    project_dir.mkdir()
    (project_dir / "README.md").write_text("# chaos\n")
    config = Config().replace(slots={"max_parallel": 6})
    runtime = Runtime(
        config, clock=clock, store_url="sqlite:///:memory:", workspace_dir=tmp_path / "ws",
        providers={"ollama": OllamaProvider(ollama_stub.url),
                   "anthropic": AnthropicProvider(API_KEY, base_url=anthropic_stub.url)},
        loops={"direct": chaotic(direct_loop), "sdk": chaotic(sdk_loop)},
    )
    context = f"({len(plans)} sessions, chaos seed {seed}; replay with CHAOS_SEED={seed}" + (
        " --chaos-full)" if chaos_full else ")")
    try:
        recorder = EventRecorder.attach(runtime)
        project = runtime.create_project("chaos", project_dir)
        agents = {
            (provider, mode): runtime.create_agent(
                f"{provider}-{mode}", provider=provider, permission_mode=mode,
                model=OLLAMA_MODEL if provider == "ollama" else ANTHROPIC_MODEL)
            for provider in ("ollama", "anthropic") for mode in ("default", "full-auto")
        }
        for plan in plans:
            plan.sid = runtime.create_session(agent_id=agents[plan.provider, plan.mode].id,
                                              project_id=project.id, source=plan.source, name=plan.tag).id
            if plan.provider == "anthropic":
                script_anthropic(anthropic_stub, plan)
            if plan.raising_subscriber:
                runtime.subscribe(plan.sid, raising_subscriber)

        chaos = Chaos(runtime, clock, plans, rng)
        chaos.start_all()
        for _ in range(ROUNDS):
            chaos.round()  # stops land mid-stream: nothing has settled since the last sends
            chaos.advance(rng.uniform(1, 90))
        for _ in range(6):  # retries, restarts, probes, resumes and idle timeouts run out
            chaos.advance(3600)

        # --- every session in a defined state -----------------------------------------------
        assert runtime.get_active_session_ids() == [], context
        paused = set(runtime.get_paused_session_ids())
        for plan in plans:
            status = runtime.internals.store.get_session(plan.sid).status
            expected = {"paused"} if plan.sid in paused else {"idle", "stopped", "error"}
            assert status in expected, f"{plan.tag} is {status!r} {context}"
        # --- zero slots in use, no pending approvals ---------------------------------------
        slots = runtime.slot_stats()
        assert (slots["in_use"], slots["waiting"]) == (0, 0), f"{slots} {context}"
        assert runtime.list_approvals() == [], context
        # --- every acknowledged user message is in the database ----------------------------
        for plan in plans:
            stored = {content for role, content in runtime.internals.store.recent_messages(plan.sid, 10_000, roles=("user",))}
            missing = [text for text in plan.acked if text not in stored]
            assert missing == [], f"{plan.tag} lost {missing} {context}"
        # --- each session's event log is well-formed -----------------------------------------
        for plan in plans:
            records = recorder.of(plan.sid)
            problems = check_event_log(plan.sid, [r.type for r in records],
                                       [getattr(r.event, "generation", None) for r in records])
            assert problems == [], f"{plan.tag}: {problems} {[r.type for r in records]} {context}"
        # the faults really happened
        types = {r.type for r in recorder.events}
        missing = {"session_stopped", "session_exited", "retry", "session_restarting", "approval_request",
                   "session_paused", "tool_status"} - types
        assert missing == set(), f"no {sorted(missing)} event {context}"
        print(f"chaos: {len(plans)} sessions ({topped_up} given a missing ingredient), "
              f"{chaos.messages} user messages, {chaos.stops} stops, "
              f"{ollama_stub.disconnects + len(anthropic_stub.disconnects)} streams cut by a stop, "
              f"{len(recorder.events)} events {context}")
    finally:
        runtime.shutdown()
        clock.close()
        ollama_stub.stop()
        anthropic_stub.close()
    # --- no thread left behind --------------------------------------------------------------
    leftovers = [t for t in set(threading.enumerate()) - threads_before if t.name not in PROCESS_WIDE_THREADS]
    for thread in leftovers:
        thread.join(THREAD_EXIT_S)
    alive = [t.name for t in leftovers if t.is_alive()]
    assert alive == [], f"threads left behind: {alive} {context}"


# --- the checker itself must be able to fail -----------------------------------------------


def test_event_log_checker_accepts_incarnations_with_supervisor_events_between():
    types = ["session_started", "thinking", "error", "session_exited", "session_restarting",
             "session_started", "result", "session_paused", "session_resumed", "session_started",
             "session_stopped", "session_stopped"]
    generations = [1, None, None, None, None, 2, None, None, None, 3, None, None]
    assert check_event_log("s", types, generations) == []


def test_event_log_checker_flags_events_after_the_end_and_unfinished_incarnations():
    late = check_event_log("s", ["session_started", "session_stopped", "content_block_delta"], [1, None, None])
    assert [p.problem for p in late] == ["content_block_delta after the end of an incarnation"]
    unfinished = check_event_log("s", ["session_started", "assistant"], [1, None])
    assert [p.problem for p in unfinished] == ["the last incarnation never ended"]
    twice = check_event_log("s", ["session_started", "session_started", "session_exited"], [2, 1, None])
    assert len(twice) == 2  # started inside an incarnation, and a generation going back
