"""The dashboard in headless Chromium: sign in, a reply streaming in, an approval given with
the button, a crashed session's restart, and a session's ``<script>`` text staying text."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from corvid_actors.testing import Turn
from tests.http.browser.conftest import login

pytestmark = pytest.mark.realclock


def test_signing_in_keeps_the_token_in_session_storage_and_shows_the_sessions(page, served):
    session = served.session(source="cli")
    served.scripted.for_session(session.id, Turn.reply("Hi."))
    served.runtime.start_process(session.id, "hello")
    page.goto(served.base_url + "/")
    page.wait_for_url("**/login?next=*")  # no token yet: the page sends you to sign in
    page.fill("#token", "not-a-token")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_have_text("That token was not accepted.")
    login(page, served)
    row = page.locator(f'tr[data-session-id="{session.id}"]')
    expect(row).to_contain_text("agent-1")
    expect(row).to_contain_text("cli")
    assert page.evaluate("sessionStorage.getItem('corvid-actors.token')") == served.operate
    assert page.evaluate("document.cookie") == ""
    assert page.context.cookies() == []
    assert page.js_errors == []


def test_a_scripted_reply_streams_into_the_session_page(page, served):
    session = served.session()
    served.scripted.for_session(session.id, Turn.reply("First answer."),
                                Turn.reply("one two three four five six", deltas=6, delta_interval_s=0.05))
    served.runtime.start_process(session.id, "hello")
    served.runtime.settle(10)  # the first reply is stored: the page shows it from the history
    login(page, served, then=f"/sessions/{session.id}")
    history = page.locator("#history")
    expect(history.locator(".message.assistant")).to_have_text(["assistantFirst answer."])
    expect(page.locator("#stream-state")).to_have_text("live")
    page.fill("#send-text", "tell me more")
    page.click("#send-form button")
    expect(history.locator(".message.assistant").nth(1)).to_have_text("assistantone two three four five six")
    expect(history.locator(".message.user").last).to_contain_text("tell me more")
    # it came as it was written: six deltas, each its own event in the page's stream
    deltas = page.locator('#events li[data-type="content_block_delta"] .detail')
    expect(deltas.last).to_have_text("ix")  # the reply in six chunks: "one t", "wo th", …, "ix"
    assert "".join(deltas.all_text_contents()[-6:]) == "one two three four five six"
    assert page.js_errors == []


def test_a_pending_tool_call_is_approved_with_the_button_and_the_session_goes_on(page, served):
    session = served.session()
    served.scripted.for_session(session.id, Turn.tool_call("list_files", {"path": "."}),
                                Turn.reply("You have notes.txt."))
    served.runtime.start_process(session.id, "what files do I have?")
    login(page, served, then="/approvals")
    item = page.locator("li.approval")
    expect(item).to_have_count(1)
    expect(item).to_contain_text("list_files")
    item.locator("button[data-verb=approve]").click()
    expect(page.locator("#notice")).to_have_text("Approved list_files.")
    expect(page.locator("#approvals-empty")).to_be_visible()
    assert served.runtime.list_approvals() == []
    page.goto(f"{served.base_url}/sessions/{session.id}")
    expect(page.locator("#history .message.assistant").last).to_contain_text("You have notes.txt.")
    assert page.js_errors == []


def test_a_crashed_session_restarting_shows_on_its_page(page, served):
    session = served.session(source="chat")  # chat sessions restart after a crash
    served.scripted.for_session(session.id, Turn.reply("Hi."), Turn.crash("model server fell over"),
                                Turn.reply("Back again."))
    served.runtime.start_process(session.id, "hello")
    served.runtime.settle(10)  # the first reply is stored: the page shows it from the history
    login(page, served, then=f"/sessions/{session.id}")
    expect(page.locator("#stream-state")).to_have_text("live")
    page.fill("#send-text", "are you there?")
    page.click("#send-form button")
    expect(page.locator('#events li[data-type="session_restarting"]')).to_contain_text("attempt 1")
    expect(page.locator('#events li[data-type="session_started"]')).to_have_count(1)  # the new incarnation
    expect(page.locator("#history .message.assistant").last).to_have_text("assistantBack again.")
    expect(page.locator("#facts")).to_contain_text("restarts1")
    assert page.js_errors == []


def test_a_reply_with_a_script_shows_as_text_and_runs_nothing(page, served):
    hostile = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    session = served.session()
    again = hostile + "<b>again</b>"
    served.scripted.for_session(session.id, Turn.reply(hostile), Turn.reply(again, deltas=3))
    served.runtime.start_process(session.id, "hello")
    served.runtime.settle(10)  # the first reply is stored: the page shows it from the history
    login(page, served, then=f"/sessions/{session.id}")
    history = page.locator("#history")
    expect(history.locator(".message.assistant .text")).to_have_text([hostile])  # from the stored history
    expect(page.locator("#stream-state")).to_have_text("live")
    page.fill("#send-text", "again")
    page.click("#send-form button")
    expect(history.locator(".message.assistant .text")).to_have_text([hostile, again])  # from the stream
    expect(page.locator('#events li[data-type="assistant"]').last).to_contain_text(again)
    assert page.locator("main script, main img").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.goto(served.base_url + "/")  # the sessions table and the approvals page hold no markup either
    expect(page.locator(f'tr[data-session-id="{session.id}"]')).to_be_visible()
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.js_errors == []


def test_the_sessions_table_filters_by_agent_and_searches(page, served):
    first, second = served.session(source="web"), served.session(source="cli")
    login(page, served)
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(2)
    page.fill("#filters input[name=agent]", "agent-2")
    page.click("#filters button[type=submit]")
    expect(rows).to_have_count(1)
    expect(rows).to_have_attribute("data-session-id", second.id)
    assert page.url.endswith("?agent=agent-2")  # the filter is in the address: reload or share it
    page.fill("#filters input[name=agent]", "")
    page.fill("#filters input[name=q]", first.id[:8])
    page.click("#filters button[type=submit]")
    expect(rows).to_have_count(1)
    expect(rows).to_have_attribute("data-session-id", first.id)
    page.fill("#filters input[name=q]", "no-such-session")
    page.click("#filters button[type=submit]")
    expect(page.locator("#sessions-empty")).to_be_visible()
    assert page.js_errors == []


def test_a_read_token_sees_the_approvals_but_its_approve_is_forbidden(page, served):
    session = served.session()
    served.scripted.for_session(session.id, Turn.tool_call("list_files", {"path": "."}), Turn.reply("Done."))
    served.runtime.start_process(session.id, "what files do I have?")
    login(page, served, token=served.read, then="/approvals")
    item = page.locator("li.approval")
    expect(item).to_contain_text("list_files")
    item.locator("button[data-verb=approve]").click()
    expect(page.locator("#notice")).to_contain_text("forbidden")
    expect(item.locator("button[data-verb=approve]")).to_be_enabled()  # still there, to retry with another token
    assert len(served.runtime.list_approvals()) == 1
