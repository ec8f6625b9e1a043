"""The ScriptedProvider on its own: how turns are chosen and served (no runtime)."""

from __future__ import annotations

import pytest

from corvid_actors.testing import ScriptedProvider, ScriptedStartFailure, ScriptedTurn, Turn


class _Token:
    """The cancel token a provider gets; never cancelled here."""

    cancelled = False

    def raise_if_cancelled(self):
        pass


def call(provider, session_id="", text="hi", generation=1, tools=()):
    from corvid_actors.providers.base import ChatMessage, ModelRequest, ToolSpec

    request = ModelRequest(model="m", system="", messages=(ChatMessage("user", text),),
                           tools=tuple(ToolSpec(name, "", {}) for name in tools),
                           session_id=session_id, generation=generation)
    deltas = []
    return provider.stream(request, lambda event: deltas.append(event.text), _Token()), deltas


def test_per_session_turns_come_before_the_shared_queue_and_the_default():
    p = ScriptedProvider(default_reply="default")
    p.reply("shared")
    p.for_session("a", "a1", Turn.reply("a2", deltas=2))
    assert call(p, "b")[0].text == "shared"  # b has no script
    assert call(p, "a")[0].text == "a1"
    response, deltas = call(p, "a")
    assert (response.text, deltas) == ("a2", ["a", "2"])
    assert call(p, "a")[0].text == "default"
    assert [(r.session_id, r.generation) for r in p.requests_for("a")] == [("a", 1)] * 3


def test_requests_without_a_session_use_the_shared_queue_and_match():
    p = ScriptedProvider()
    p.reply("for bob", match="bob")
    p.reply("anyone")
    assert call(p, text="hi alice")[0].text == "anyone"
    assert call(p, text="hi bob")[0].text == "for bob"


def test_tool_calls_without_ids_get_unique_ids_when_served():
    p = ScriptedProvider()
    p.for_session("a", Turn.reply(tool_calls=[("read_file", {"path": "x"}), ("list_files", {})]),
                  Turn.tool_call("read_file", {"path": "y"}))
    first, _ = call(p, "a", tools=("read_file", "list_files"))  # a loop that offers tools
    second, _ = call(p, "a", tools=("read_file",))
    ids = [c.id for c in (*first.tool_calls, *second.tool_calls)]
    assert len(set(ids)) == 3 and all(ids)
    assert first.stop_reason == "tool_use" and first.tool_calls[0].arguments == {"path": "x"}


def test_tool_calls_offered_no_tools_raise_a_script_error_naming_the_loop():
    from corvid_actors.testing import ScriptError

    p = ScriptedProvider()
    p.for_session("a", Turn.tool_call("read_file", {"path": "y"}))
    with pytest.raises(ScriptError, match="session a: the scripted turn calls 'read_file', but the session's loop "
                                          "is the 'conversation' loop, which runs no tools"):
        call(p, "a")
    assert len(p.script_errors) == 1 and p.remaining("a") == 0


def test_errors_and_exits_are_raised_as_classified():
    from corvid_actors.providers.base import ErrorKind, ProviderError, SessionExit

    p = ScriptedProvider()
    p.for_session("a", Turn.api_error("context_overflow", "too long", status=400),
                  Turn.api_error("tools_unsupported"), Turn.outage(), Turn.crash("x"), Turn.exit(7),
                  Turn.clean_exit())
    kinds = []
    for _ in range(4):
        with pytest.raises(ProviderError) as caught:
            call(p, "a")
        kinds.append(caught.value.kind)
    assert kinds == [ErrorKind.CONTEXT_OVERFLOW, ErrorKind.TOOLS_UNSUPPORTED, ErrorKind.RETRYABLE,
                     ErrorKind.FATAL]
    for code in (7, 0):
        with pytest.raises(SessionExit) as exited:
            call(p, "a")
        assert exited.value.code == code
    with pytest.raises(ValueError):
        Turn.api_error("no_such_kind")


def test_a_start_failure_is_consumed_by_a_start_only():
    p = ScriptedProvider(default_reply="default")
    p.for_session("a", Turn.start_failure("nope"), "after")
    assert call(p, "a")[0].text == "default"  # a call does not consume it
    with pytest.raises(ScriptedStartFailure, match="nope"):
        p.before_start("a")
    p.before_start("a")  # the next start works
    p.before_start("b")
    assert call(p, "a")[0].text == "after"
    assert (p.starts_of("a"), p.starts_of("b"), p.remaining("a")) == (2, 1, 0)


def test_scripting_mistakes_are_refused():
    p = ScriptedProvider()
    with pytest.raises(ValueError, match="per session"):
        p.add(Turn.start_failure())
    with pytest.raises(ValueError, match="match"):
        p.for_session("a", ScriptedTurn(text="x", match="y"))


def test_pending_turns_count_the_shared_queue_and_every_script():
    p = ScriptedProvider()
    p.reply("s")
    p.for_session("a", "a1", "a2")
    p.for_session("b", Turn.start_failure())
    assert p.pending_turns == 4
