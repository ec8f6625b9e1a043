"""Issue 16 item 2: building a session (provider, tools, MCP servers, prompts) runs on the
new incarnation's own worker, not on the supervisor's thread. A session whose MCP server
hangs at initialise (a real one, over stdio) delays only itself: send_message, start and
stop_process of other sessions stay quick (bounded, real clock), and a stop during the
build is honoured at once; the hanging server's process tree is gone afterwards."""

from __future__ import annotations

import threading

from corvid_actors.config import Config
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing import real_perf_counter
from corvid_actors.testing.ollama_stub import OllamaStubServer
from corvid_actors.tools.mcp_client import add_mcp_server
from tests.fixtures.mcp_servers import live_processes, new_tag, server_command

OLLAMA_MODEL = "llama3.1:8b"
#: how long the hanging server is waited for (real seconds)
CONNECT_S = 4.0
#: what a call of another session may take while that build hangs (real seconds)
QUICK_S = 1.0
#: the stop test needs the build hanging only until one stop (< QUICK_S) has come, and then
#: waits for the build to time out: a shorter wait, with room for the server's start-up
STOP_CONNECT_S = 2.5 * QUICK_S


def _e2e(make_e2e, stub, connect_s=CONNECT_S):
    cfg = Config().replace(slots={"max_parallel": 4}, mcp={"connect_timeout_s": connect_s})
    return make_e2e({"ollama": OllamaProvider(stub.url)}, cfg)


def _hanging_session(e2e, tag):
    s = e2e.session(provider="ollama", model=OLLAMA_MODEL, mode="full-auto")
    command, args = server_command("hang", tag)
    add_mcp_server(e2e.runtime.internals.store, "stuck", command, args=args, agent_id=s.agent_id)
    return s


def _timed(fn, *args):
    # real time: the runtime's SimClock freezes time.perf_counter in the whole process
    t0 = real_perf_counter()
    value = fn(*args)
    return value, real_perf_counter() - t0


def _start_in_thread(runtime, sid, prompt):
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("pid", runtime.start_process(sid, prompt)),
                              daemon=True)
    thread.start()
    return thread, out


def _wait_for(predicate, limit_s):
    deadline = real_perf_counter() + limit_s
    while not predicate():
        assert real_perf_counter() < deadline, "condition not reached in time"
        threading.Event().wait(0.02)


def test_other_sessions_are_served_while_one_build_hangs(make_e2e):
    with OllamaStubServer() as ollama:
        tag = new_tag()
        e2e = _e2e(make_e2e, ollama)
        rt = e2e.runtime
        other = e2e.session(provider="ollama", model=OLLAMA_MODEL, mode="full-auto")
        third = e2e.session(provider="ollama", model=OLLAMA_MODEL, mode="full-auto")
        ollama.add_reply("hello")
        rt.start_process(other.id, "hi")
        rt.settle()
        stuck = _hanging_session(e2e, tag)
        starter, started = _start_in_thread(rt, stuck.id, "hi")
        _wait_for(lambda: live_processes(tag), CONNECT_S)  # its server is up and not answering
        ollama.add_reply("still here")
        delivered, send_s = _timed(rt.send_message, other.id, "are you there?")
        assert delivered is True and send_s < QUICK_S
        pid, start_s = _timed(rt.start_process, third.id, "and you?")
        assert pid is not None and start_s < QUICK_S
        _, stop_s = _timed(rt.stop_process, third.id)
        assert stop_s < QUICK_S
        assert rt.is_running(stuck.id) and starter.is_alive()  # still building
        starter.join(CONNECT_S * 3)
        assert not starter.is_alive() and started["pid"] is not None
        rt.settle()
        [failed] = [e for e in e2e.events(stuck.id, "system") if e.subtype == "mcp_server_failed"]
        assert f"within {CONNECT_S:g}s" in failed.message
        roles = [(r, c) for r, c in rt.internals.store.recent_messages(other.id, 50)]
        asked = roles.index(("user", "are you there?"))
        assert any(r == "assistant" for r, _ in roles[asked:])  # answered the message sent meanwhile
        rt.stop_process(stuck.id)
        rt.settle()
        assert live_processes(tag) == []


def test_a_stop_during_the_build_is_honoured_at_once(make_e2e):
    with OllamaStubServer() as ollama:
        tag = new_tag()
        e2e = _e2e(make_e2e, ollama, STOP_CONNECT_S)
        rt = e2e.runtime
        stuck = _hanging_session(e2e, tag)
        starter, started = _start_in_thread(rt, stuck.id, "hi")
        _wait_for(lambda: live_processes(tag), STOP_CONNECT_S)
        _, stop_s = _timed(rt.stop_process, stuck.id)
        assert stop_s < QUICK_S
        starter.join(QUICK_S)
        assert not starter.is_alive() and started["pid"] is None  # it never ran
        assert not rt.is_running(stuck.id)
        # the event reaches the recorder on the bus thread: wait for it (bounded)
        _wait_for(lambda: [r.type for r in e2e.recorder.of(stuck.id)][-1:] == ["session_stopped"], QUICK_S)
        assert rt.internals.store.get_session(stuck.id).status == "stopped"
        rt.settle(STOP_CONNECT_S * 3)  # the build finishes (times out) and closes what it made
        assert live_processes(tag) == []
        assert not rt.is_running(stuck.id)
        assert e2e.events(stuck.id, "session_started") == []
