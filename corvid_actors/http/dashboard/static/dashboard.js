// corvid-actors dashboard: reads the daemon's JSON API with the operator's token.
//
// The token lives in sessionStorage (this tab only) and travels in the Authorization header
// of fetch calls; it is never put in a cookie, so no other site can make the browser use it
// (the CSRF story). Every value from the API is rendered with textContent, never parsed as HTML:
// a session's reply containing <script> shows as text. Server-sent events are read with
// fetch and a stream reader, because EventSource cannot send an Authorization header.
"use strict";

(() => {
  const TOKEN_KEY = "corvid-actors.token";
  const API = "/api/v1";
  const RECONNECT_MS = [500, 1000, 2000, 5000];
  const EVENT_LINES_KEPT = 500;
  const EXTEND_MINUTES = 30;

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // --- the token and the API ------------------------------------------------------------------

  const token = () => sessionStorage.getItem(TOKEN_KEY);

  function toLogin() {
    const next = location.pathname + location.search;
    location.assign("/login?next=" + encodeURIComponent(next));
  }

  function headers(extra) {
    return Object.assign({ Authorization: "Bearer " + token() }, extra || {});
  }

  async function api(path, options) {
    const opts = options || {};
    const init = {
      method: opts.method || "GET",
      headers: headers({ Accept: "application/json" }),
      credentials: "omit",
      cache: "no-store",
    };
    if (opts.body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    const resp = await fetch(API + path, init);
    let data = null;
    try {
      data = await resp.json();
    } catch (_) {
      data = null;
    }
    if (resp.status === 401 && !opts.noRedirect) {
      sessionStorage.removeItem(TOKEN_KEY);
      toLogin();
    }
    if (!resp.ok) {
      const err = (data && data.error) || {};
      throw new ApiError(resp.status, err.code || "http_" + resp.status, err.message || resp.statusText);
    }
    return data;
  }

  // Server-sent events over fetch: calls onEvent(data, id) per event, reconnects with
  // Last-Event-ID after a broken stream, and stops when signal aborts. onState("live") after
  // each (re)connect and each gap the server reports: the caller reads again what it shows.
  async function stream(path, onEvent, onState, signal) {
    let lastId = null;
    let failures = 0;
    while (!signal.aborted) {
      try {
        const h = headers({ Accept: "text/event-stream" });
        if (lastId !== null) h["Last-Event-ID"] = lastId;
        const resp = await fetch(API + path, { headers: h, credentials: "omit", cache: "no-store", signal });
        if (resp.status === 401) {
          sessionStorage.removeItem(TOKEN_KEY);
          toLogin();
          return;
        }
        if (!resp.ok || !resp.body) throw new ApiError(resp.status, "http_" + resp.status, resp.statusText);
        onState("live");
        failures = 0;
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value.replace(/\r\n?/g, "\n");
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const parsed = parseEventBlock(block);
            if (parsed.id !== null) lastId = parsed.id;
            if (parsed.data !== null) {
              let data;
              try {
                data = JSON.parse(parsed.data);
              } catch (_) {
                continue;
              }
              if (parsed.name === "message") onEvent(data, parsed.id);
              else if (parsed.name === "gap") onState("live");  // events were missed: read again
              else if (parsed.name === "end") onState("the daemon is stopping");
            }
          }
        }
      } catch (e) {
        if (signal.aborted) return;
      }
      onState("reconnecting…");
      const wait = RECONNECT_MS[Math.min(failures, RECONNECT_MS.length - 1)];
      failures += 1;
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }

  function parseEventBlock(block) {
    let id = null;
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") id = value;
      else if (field === "event") name = value;
      else if (field === "data") data.push(value);
    }
    return { id, name, data: data.length ? data.join("\n") : null };
  }

  // An SSE payload is the event dict itself or {session_id, at, event}: one shape here.
  function unwrap(data) {
    if (data && typeof data.event === "object" && data.event !== null) {
      return Object.assign({}, data.event, {
        session_id: data.session_id || data.event.session_id,
        at: data.at || data.event.at,
      });
    }
    return data || {};
  }

  const listOf = (data, key) => (Array.isArray(data) ? data : (data && data[key]) || []);

  // --- DOM helpers: text only -----------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "className") node.className = value;
      else if (key.startsWith("data-") || key === "href" || key === "type" || key === "title") {
        node.setAttribute(key, String(value));
      }
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const $ = (selector) => document.querySelector(selector);

  function notice(message, kind) {
    const box = $("#notice");
    if (!box) return;
    box.textContent = message || "";
    box.className = "notice " + (kind || "");
    box.hidden = !message;
  }

  function fail(error) {
    if (error instanceof ApiError && error.status === 401) return;
    notice((error && error.code ? error.code + ": " : "") + (error && error.message ? error.message : error), "error");
  }

  function fmtCost(value) {
    const n = Number(value || 0);
    return "$" + n.toFixed(n < 1 ? 4 : 2);
  }

  function fmtTime(value) {
    if (!value) return "—";
    const d = new Date(value);
    return isNaN(d.getTime()) ? String(value) : d.toLocaleString();
  }

  function facts(dl, entries) {
    dl.replaceChildren();
    for (const [name, value] of entries) {
      dl.append(el("dt", { text: name }), el("dd", { text: value === null || value === undefined ? "—" : value }));
    }
  }

  function sessionLink(id) {
    return el("a", { href: "/sessions/" + encodeURIComponent(id), text: id.slice(0, 8), title: id });
  }

  // --- pages ----------------------------------------------------------------------------------

  function loginPage() {
    const form = $("#login-form");
    const error = $("#login-error");
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const value = $("#token").value.trim();
      sessionStorage.setItem(TOKEN_KEY, value);
      try {
        await api("/health", { noRedirect: true });
      } catch (e) {
        if (e.status === 401) {
          sessionStorage.removeItem(TOKEN_KEY);
          error.textContent = "That token was not accepted.";
          error.hidden = false;
          return;
        }
      }
      const next = new URLSearchParams(location.search).get("next") || "/";
      location.assign(next.startsWith("/") && !next.startsWith("//") ? next : "/");
    });
  }

  function sessionsPage() {
    const form = $("#filters");
    const body = $("#sessions tbody");
    const more = $("#more");
    let cursor = null;
    for (const [key, value] of new URLSearchParams(location.search)) {
      if (form.elements[key]) form.elements[key].value = value;
    }

    function query() {
      const params = new URLSearchParams();
      for (const name of ["status", "agent", "source", "q"]) {
        const value = form.elements[name].value.trim();
        if (value) params.set(name, value);
      }
      return params;
    }

    function row(s) {
      return el("tr", { "data-session-id": s.id },
        el("td", {}, sessionLink(s.id)),
        el("td", {}, el("span", { className: "status status-" + s.status, text: s.status })),
        el("td", { text: s.agent || "—" }),
        el("td", { text: s.source || "—" }),
        el("td", { text: s.owner || (s.here ? "this daemon" : "—") }),
        el("td", { className: "num", text: s.turns ?? 0 }),
        el("td", { className: "num", text: fmtCost(s.cost_usd) }),
        el("td", { text: fmtTime(s.last_activity || s.updated_at) }));
    }

    async function load(append) {
      const params = query();
      if (append && cursor) params.set("cursor", cursor);
      try {
        const data = await api("/sessions?" + params.toString());
        const sessions = listOf(data, "sessions");
        if (!append) body.replaceChildren();
        body.append(...sessions.map(row));
        cursor = (data && data.next_cursor) || null;
        more.hidden = !cursor;
        $("#sessions-empty").hidden = body.children.length > 0;
        notice("");
      } catch (e) {
        fail(e);
      }
    }

    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const params = query();
      history.replaceState(null, "", params.toString() ? "?" + params : location.pathname);
      load(false);
    });
    more.addEventListener("click", () => load(true));
    load(false);
    // status changes show without a reload: a lifecycle event on any session reloads the page
    const lifecycle = new Set(["session_started", "session_exited", "session_stopped", "session_paused",
      "session_resumed", "session_restarting", "result"]);
    let pending = null;
    stream("/events", (data) => {
      if (!lifecycle.has(unwrap(data).type) || pending) return;
      pending = setTimeout(() => { pending = null; load(false); }, 300);
    }, () => {}, new AbortController().signal);
  }

  function describe(ev) {
    switch (ev.type) {
      case "content_block_delta": return ev.text;
      case "assistant": return ev.content;
      case "message": return (ev.role || "") + ": " + (ev.text || "");
      case "result": return ev.subtype + (ev.result ? " — " + ev.result : "");
      case "tool_status": return (ev.tool_name || "") + " " + (ev.state || "") + (ev.status_message ? ": " + ev.status_message : "");
      case "approval_request": return (ev.tool_name || "") + ": " + (ev.description || "");
      case "approval_resolved": return ev.behavior + (ev.message ? " — " + ev.message : "");
      case "session_started": return "pid " + ev.pid;
      case "session_exited": return "code " + ev.code;
      case "session_stopped": return ev.reason;
      case "session_restarting": return "attempt " + ev.attempt + " in " + ev.delay_s + " s";
      case "error": case "session_error": return (ev.error_type || "") + ": " + (ev.message || "");
      default: return ev.message || ev.subtype || "";
    }
  }

  function approvalItem(a, onDone) {
    const item = el("li", { className: "approval", "data-approval-id": a.id },
      el("div", { className: "what" },
        el("strong", { text: a.tool_name }), " ",
        el("span", { className: "description", text: a.description })),
      el("div", { className: "meta" }, "session ", sessionLink(a.session_id || ""),
        a.created_at ? " · asked " + fmtTime(a.created_at) : "",
        a.timeout_s ? " · denied by itself after " + a.timeout_s + " s" : ""));
    const buttons = el("div", { className: "buttons" });
    for (const [verb, label] of [["approve", "Approve"], ["deny", "Deny"]]) {
      const button = el("button", { type: "button", className: verb, "data-verb": verb, text: label });
      button.addEventListener("click", async () => {
        for (const b of buttons.querySelectorAll("button")) b.disabled = true;
        try {
          await api("/approvals/" + encodeURIComponent(a.id) + "/" + verb, { method: "POST", body: {} });
          item.remove();
          notice((verb === "approve" ? "Approved " : "Denied ") + a.tool_name + ".", "ok");
          if (onDone) onDone();
        } catch (e) {
          for (const b of buttons.querySelectorAll("button")) b.disabled = false;
          fail(e);
        }
      });
      buttons.append(button);
    }
    item.append(buttons);
    return item;
  }

  function sessionPage() {
    const root = $(".session");
    const sid = root.dataset.sessionId;
    const path = "/sessions/" + encodeURIComponent(sid);
    const historyList = $("#history");
    const live = $("#live-reply");
    const events = $("#events");
    const approvalsBox = $("#session-approvals");

    function message(role, text) {
      const item = el("li", { className: "message " + role, "data-role": role },
        el("span", { className: "role", text: role }), el("div", { className: "text", text: text }));
      historyList.append(item);
      return item;
    }

    function eventLine(ev) {
      // the panel follows new events while it is scrolled to its end
      const following = events.scrollTop + events.clientHeight >= events.scrollHeight - 4;
      const at = ev.at ? new Date(ev.at) : new Date();
      events.append(el("li", { "data-type": ev.type },
        el("time", { text: isNaN(at.getTime()) ? String(ev.at) : at.toLocaleTimeString(), title: ev.at }),
        el("span", { className: "type", text: ev.type }),
        el("span", { className: "detail", text: describe(ev) })));
      while (events.children.length > EVENT_LINES_KEPT) events.firstChild.remove();
      if (following) events.scrollTop = events.scrollHeight;
    }

    async function loadSummary() {
      try {
        const s = await api(path);
        facts($("#facts"), [["id", s.id], ["status", s.status], ["agent", s.agent], ["source", s.source],
          ["owner", s.owner || (s.here ? "this daemon" : null)], ["turns", s.turns], ["cost", fmtCost(s.cost_usd)],
          ["restarts", s.restarts], ["pending approvals", s.pending_approvals]]);
        const pending = s.approvals || [];
        approvalsBox.hidden = pending.length === 0;
        approvalsBox.querySelector("ul").replaceChildren(...pending.map((a) => approvalItem(a, loadSummary)));
      } catch (e) {
        fail(e);
      }
    }

    // The page shows the history (messages and the daemon's recent events), then the stream
    // opened without its backlog, and reads the history again once the stream is live (what
    // happened in between is in it). A reply the history showed may still come down the
    // stream once, around that reread, stamped a few milliseconds apart: a streamed reply
    // whose text the history showed within REPEAT_WINDOW_MS of it is that reply, not shown
    // twice. Deltas older than the history are dropped.
    const REPEAT_WINDOW_MS = 1000;
    let historyUntil = 0;
    let shownReplies = [];
    const when = (ev) => (ev.at ? Date.parse(ev.at) || 0 : Infinity);
    const newDelta = (ev) => when(ev) >= historyUntil;
    const newReply = (ev) => !shownReplies.some((r) => r.text === ev.content && Math.abs(r.at - when(ev)) < REPEAT_WINDOW_MS);

    async function loadHistory() {
      try {
        const data = await api(path + "/history?tail=200");
        historyList.replaceChildren();
        events.replaceChildren();
        const items = listOf(data, "events").map(unwrap);
        shownReplies = [];
        // the history joins stored messages and the daemon's recent events: one reply can be
        // in both (their times are stamped apart under load); within a turn, a reply whose
        // text was just shown is that reply
        let turnReplies = new Set();
        for (const item of items) {
          eventLine(item);
          const reply = item.type === "assistant" ? item.content
            : item.type === "message" && item.role === "assistant" ? item.text : null;
          if (reply !== null) {
            if (!turnReplies.has(reply)) message("assistant", reply);
            turnReplies.add(reply);
            shownReplies.push({ text: reply, at: when(item) });
          } else if (item.type === "message" && item.role === "user") {
            turnReplies = new Set();
            message("user", item.text);
          }
        }
        historyUntil = Math.max(historyUntil, ...items.map((item) => (item.at ? Date.parse(item.at) || 0 : 0)));
      } catch (e) {
        fail(e);
      }
    }

    function onEvent(data) {
      const ev = unwrap(data);
      eventLine(ev);
      if (ev.type === "content_block_delta" && newDelta(ev)) {
        live.hidden = false;
        live.textContent += ev.text || "";
      } else if (ev.type === "assistant") {
        live.textContent = "";
        live.hidden = true;
        if (newReply(ev)) message("assistant", ev.content);
      } else if (["approval_request", "approval_resolved", "session_started", "session_exited",
        "session_stopped", "session_restarting", "session_paused", "session_resumed", "result"].includes(ev.type)) {
        loadSummary();
      }
    }

    for (const button of $("#actions").querySelectorAll("button")) {
      button.addEventListener("click", async () => {
        const action = button.dataset.action;
        try {
          await api(path + "/" + action, { method: "POST", body: action === "extend" ? { minutes: EXTEND_MINUTES } : {} });
          notice(action + ": done", "ok");
          loadSummary();
        } catch (e) {
          fail(e);
        }
      });
    }

    $("#send-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const input = $("#send-text");
      const text = input.value;
      // shown before the POST: the reply may stream in before the POST's answer arrives
      const sent = message("user", text);
      input.value = "";
      try {
        await api(path + "/messages", { method: "POST", body: { text } });
      } catch (e) {
        sent.remove();
        input.value = text;
        fail(e);
      }
    });

    loadSummary();
    // the history is read again each time the stream (re)connects: what happened between
    // the first read and the stream's start (or during a reconnect) is not lost
    const state = $("#stream-state");
    const show = (s) => {
      state.textContent = s;
      state.dataset.state = s;
    };
    loadHistory().then(() => stream(path + "/events?backlog=0", onEvent, (s) => {
      if (s === "live") loadHistory().then(() => show(s));  // "live": streaming, history read
      else show(s);
    }, new AbortController().signal));
  }

  function approvalsPage() {
    const list = $("#approvals");
    const empty = () => { $("#approvals-empty").hidden = list.children.length > 0; };
    async function load() {
      try {
        const data = await api("/approvals");
        list.replaceChildren(...listOf(data, "approvals").map((a) => approvalItem(a, empty)));
        empty();
      } catch (e) {
        fail(e);
      }
    }
    load();
    stream("/events", (data) => {
      const type = unwrap(data).type;
      if (type === "approval_request" || type === "approval_resolved") load();
    }, () => {}, new AbortController().signal);
  }

  function healthPage() {
    const pick = (obj, ...keys) => keys.map((k) => [k, obj && obj[k] !== undefined ? fmtValue(obj[k]) : null]);
    function fmtValue(v) {
      if (v === null || v === undefined) return "—";
      if (Array.isArray(v)) return v.length ? v.map(fmtValue).join(", ") : "none";
      if (typeof v === "object" && Object.keys(v).length === 0) return "none";
      if (typeof v === "object") return Object.entries(v).map(([k, x]) => k + ": " + (typeof x === "object" && x !== null ? JSON.stringify(x) : x)).join(" · ");
      return String(v);
    }
    function all(dl, obj) {
      if (obj && typeof obj === "object" && Object.keys(obj).length === 0) obj = "not reported";
      facts(dl, obj && typeof obj === "object" ? Object.entries(obj).map(([k, v]) => [k, fmtValue(v)]) : [["state", fmtValue(obj)]]);
    }
    async function load() {
      try {
        // health answers for the store, the actors and the cluster; stats for the slot pool
        const [h, stats] = await Promise.all([api("/health"), api("/stats").catch(() => ({}))]);
        $("#health-raw").textContent = JSON.stringify({ health: h, stats }, null, 2);
        facts($("#health-daemon"), [["status", fmtValue(h.status)], ...pick(h.daemon, "pid", "version", "uptime_s", "shutting_down"),
          ["accepting new work", fmtValue(h.accepting_new_work)],
          ["running sessions", fmtValue(h.sessions && h.sessions.running)],
          ["paused sessions", fmtValue(h.sessions && h.sessions.paused)],
          ...(h.reasons ? [["reasons", fmtValue(h.reasons)]] : [])]);
        all($("#health-store"), h.store);
        all($("#health-sandbox"), (h.daemon && h.daemon.sandbox) || h.sandbox || stats.sandbox || "not reported");
        all($("#health-slots"), stats.slots || h.slot_pool || "not reported");
        const cluster = h.cluster;
        if (cluster && Array.isArray(cluster.members)) {
          facts($("#health-cluster"), cluster.members.map((m) => [m.daemon_id || m.id || "?", fmtValue(m.state || m.status || m)]));
        } else {
          all($("#health-cluster"), cluster || "single daemon (no cluster)");
        }
        all($("#health-actors"), h.actors);
        notice("");
      } catch (e) {
        fail(e);
      }
    }
    load();
    setInterval(load, 5000);
  }

  function modePage() {
    const MODES = ["normal", "queued", "paused"];
    const select = $("#mode-select");
    select.replaceChildren(...MODES.map((m) => el("option", { text: m })));
    async function load() {
      try {
        const data = await api("/mode");
        $("#mode-current").textContent = data.mode;
        select.value = data.mode;
      } catch (e) {
        fail(e);
      }
    }
    $("#mode-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        const data = await api("/mode", { method: "PUT", body: { mode: select.value } });
        $("#mode-current").textContent = data.mode;
        notice("Mode set to " + data.mode + ".", "ok");
      } catch (e) {
        fail(e);
      }
    });
    load();
  }

  const PAGES = { sessions: sessionsPage, session: sessionPage, approvals: approvalsPage,
    health: healthPage, mode: modePage };

  document.addEventListener("DOMContentLoaded", () => {
    const page = document.body.dataset.page;
    if (page === "login") {
      loginPage();
      return;
    }
    if (!token()) {
      toLogin();
      return;
    }
    const out = $("#sign-out");
    out.hidden = false;
    out.addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      location.assign("/login");
    });
    PAGES[page]();
  });
})();
