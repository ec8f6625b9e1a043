"""How the operator CLI shows the daemon's replies to people: tables, fields, one-liners.

Text is data: session names, commands, model, tool and agent text are shown exactly as
stored — rich cells are ``Text`` objects, never markup — and control characters (terminal
escapes) are shown as ``\\x1b``-style escapes instead of being sent to the terminal. A table
is rich's when rich is installed (an optional dependency), aligned text otherwise.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from typing import Any, TextIO

from corvid_actors.actors.admin._views import LIFECYCLE_LOG

#: C0 and C1 control characters but tab and newline (a model's "\x1b[2J" must not clear the screen)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe_text(value: Any) -> str:
    """``value`` as text with control characters made visible (``\\x1b``): what a user,
    model or tool wrote is shown, never executed by the terminal."""
    text = "" if value is None else str(value)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def render_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO, *,
                 use_rich: bool | None = None, keep: Sequence[str] = ("ID",), width: int | None = None) -> None:
    """A table: rich's when it is installed (and ``use_rich`` is not False), else aligned text.

    The ``keep`` columns (ids, names) are never cut or wrapped on a narrow terminal: the
    others shrink first. ``width`` overrides the terminal's width (tests). Cells are data:
    shown as they are, never parsed as rich markup."""
    cells = [[safe_text(v) for v in row] for row in rows]
    if use_rich is not False:
        try:
            from rich.console import Console
            from rich.table import Table
            from rich.text import Text
        except ImportError:
            use_rich = False
        else:
            table = Table(box=None, header_style="bold", pad_edge=False)
            for i, name in enumerate(columns):
                if name in keep:
                    table.add_column(name, no_wrap=True, min_width=max([len(name)] + [len(r[i]) for r in cells]))
                else:
                    table.add_column(name, overflow="ellipsis")
            for row in cells:
                table.add_row(*(Text(cell) for cell in row))
            if width is None:
                width = None if out.isatty() else max(shutil.get_terminal_size((200, 24)).columns, 200)
            Console(file=out, width=width, highlight=False).print(table)
            return
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    for row in [list(columns), *cells]:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _duration(seconds: Any) -> str:
    """A duration for people: ``42s``, ``1m36s``, ``2h05m``, ``3d04h`` (``-`` for none)."""
    if seconds is None:
        return "-"
    s = int(float(seconds))
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _when(iso: Any) -> str:
    """An ISO 8601 UTC time to the second (``2026-01-01T00:05:00Z``); ``-`` for none."""
    text = str(iso or "")
    return text[:19] + "Z" if len(text) >= 19 else (text or "-")


def _value(value: Any) -> str:
    """A field value: text as it is, anything structured as JSON (never Python's repr)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _spend(spent: Any, cap: Any) -> str:
    """``0.0300`` or, against a cap, ``0.0300/0.05``."""
    return f"{float(spent or 0.0):.4f}" + (f"/{float(cap):g}" if cap else "")


def _short(value: Any, width: int = 60) -> str:
    text = safe_text(" ".join(str(value or "").split()))
    return text if len(text) <= width else text[: width - 1] + "…"


def show_sessions(result: list[dict[str, Any]] | dict[str, Any], out: TextIO) -> None:
    """``admin sessions``: one row per session, ids and agent names never cut. The local
    view (the daemon could not reach the store) is said first, with its reason."""
    rows = result["sessions"] if isinstance(result, dict) else result
    if isinstance(result, dict) and result.get("view") == "local":
        warning = result.get("warning") or {}
        out.write(f"LOCAL VIEW [{safe_text(warning.get('code', ''))}]: {safe_text(warning.get('message', ''))}\n\n")
        if not rows:
            out.write("no sessions run in this daemon\n")
            return
    if not rows:
        out.write("no sessions\n")
        return
    # several daemons: which one owns each session (its lease), "-" for none
    cluster = any("owner" in r for r in rows)
    render_table(
        ["ID", "NAME", "STATUS", "AGENT", "SOURCE", *(["OWNER"] if cluster else []), "UPTIME", "RESTARTS",
         "PAUSED UNTIL", "APPROVALS", "COST $ (/CAP)", "TURNS"],
        [[r["id"][:8], _short(r["name"], 24), r["status"] + ("*" if r.get("restart_pending") else ""), r["agent"],
          r["source"], *([r.get("owner") or "-"] if cluster else []), _duration(r["uptime_s"]), r["restarts"],
          _when(r["paused_until"]), r["pending_approvals"], _spend(r["cost_usd"], r.get("budget_usd")), r["turns"]]
         for r in rows],
        out, keep=("ID", "AGENT"),
    )


def show_session(s: dict[str, Any], out: TextIO) -> None:
    """``admin session ID``: its fields, pending approvals, recent messages and events."""
    # Several daemons: the owner answered, or (it did not) the database, and this says so.
    if s.get("owner_unreachable"):
        out.write(f"note: {safe_text(s['owner_unreachable'])}\n\n")
    # The pid is the runtime's own counter, not an OS process: it stays in --json only.
    keys = ("id", "name", "status", "agent", "source", "participant", *(("owner",) if "owner" in s else ()),
            "provider", "uptime_s", "timeout_s", "in_turn", "restarts", "paused_until", "restart_pending",
            "cost_usd", "budget_usd", "turns", "created_at")
    for key in keys:
        value = s.get(key)
        if key.endswith("_s"):
            key, value = key[:-2], _duration(value)
        out.write(f"{key + ':':<17}{'-' if value in (None, '') else safe_text(value)}\n")
    if s.get("ownership"):  # several daemons: where it ran, oldest first
        out.write("\nwhere it ran:\n")
        render_table(["DAEMON", "EPOCH", "SINCE", "UNTIL", "CAME (WHY)", "WENT (WHY)"],
                     [[o["daemon"], o["epoch"], _when(o["since"]), _when(o["until"]) if o["until"] else "now",
                       o["reason_in"], o["reason_out"] or "-"] for o in s["ownership"]], out, keep=("DAEMON",))
    if s["approvals"]:
        out.write("\npending approvals:\n")
        show_approvals(s["approvals"], out)
    out.write("\nrecent messages:\n")
    render_table(["ROLE", "CONTENT"], [[m["role"], _short(m["content"], 100)] for m in s["messages"]], out)
    out.write("\nrecent events:\n")
    render_table(["AT", "EVENT", "DETAIL"],
                 [[e["at"][11:23] + "Z", e["type"], describe_event(e)] for e in s["events"]], out)


def show_approvals(rows: list[dict[str, Any]], out: TextIO) -> None:
    """``admin approvals``: pending tool approvals (a queued one waits for you: no countdown)."""
    if not rows:
        out.write("no pending approvals\n")
        return
    # A queued request (timeout_s None) waits for a human: no countdown to show.
    render_table(["ID", "SESSION", "TOOL", "DESCRIPTION", "CREATED", "TIMEOUT"],
                 [[r["id"], r["session_id"][:8], r["tool_name"], _short(r["description"]), _when(r["created_at"]),
                   "waits for you" if r["timeout_s"] is None else _duration(r["timeout_s"])] for r in rows], out,
                 keep=("ID", "SESSION"))


def show_mapping(data: Any, out: TextIO, indent: int = 0) -> None:
    """Nested dicts as indented ``key: value`` lines."""
    for key, value in data.items():
        if isinstance(value, dict):
            out.write(f"{' ' * indent}{safe_text(key)}:\n")
            show_mapping(value, out, indent + 2)
        elif key.endswith("_s") and isinstance(value, int | float) and not isinstance(value, bool):
            out.write(f"{' ' * indent}{key[:-2]}: {_duration(value)}\n")  # uptime_s 96.1 -> uptime 1m36s
        else:
            out.write(f"{' ' * indent}{safe_text(key)}: {safe_text(_value(value))}\n")


def describe_event(event: dict[str, Any]) -> str:
    """One line for an event of ``corvid-actors events`` / ``admin session``."""
    rule = LIFECYCLE_LOG.get(event["type"])
    if rule is not None:
        return safe_text(rule[1](event))
    if event["type"] == "content_block_delta":
        return json.dumps(event.get("text", ""), ensure_ascii=False)
    if event["type"] == "message":  # a stored message of the history (``events ID``)
        return _short(f"{event.get('role', '')}: {safe_text(str(event.get('text', '')))}", 100)
    if event["type"] == "queue_status":
        return event.get("status_message") or "no longer waiting for a model slot"
    skip = {"type", "at"}
    return _short(" ".join(f"{k}={_value(v)}" for k, v in event.items()
                           if k not in skip and v not in ("", None, {}, [])), 100)


def _one_liner(cmd: str, result: Any) -> str:
    match cmd:
        case "start":
            made = ", created" if result.get("created_agent") else ""
            return (f"started session {result['session']} (agent {result['agent']}{made})\n"
                    f"watch the reply: corvid-actors events {result['session'][:8]}")
        case "send":
            return f"delivered to {result['session'][:8]}" if result["delivered"] else "not delivered"
        case "stop":
            if result.get("already_stopped"):
                return f"{result['session'][:8]} was already stopped"
            state = "was running" if result["was_running"] else "paused" if result["was_paused"] else "was not running"
            return f"stopped {result['session'][:8]} ({state})"
        case "restart":
            state = "was running" if result["was_running"] else "paused" if result["was_paused"] else "was not running"
            return f"restarted {result['session'][:8]} ({state}): {result['how'].replace('_', ' ')}"
        case "resume":
            return f"{result['session'][:8]}: {result['how'].replace('_', ' ')}"
        case "crash":
            return (f"crashed {result['session'][:8]}: the supervisor restarts it after its backoff"
                    if result["crashed"] else f"{result['session'][:8]} was not running: nothing crashed")
        case "extend":
            capped = " (capped: at most 4x the session timeout)" if result.get("capped") else ""
            return f"{result['session'][:8]}: stops in {_duration(result['timeout_s'])} unless active again{capped}"
        case "approve" | "deny":
            return f"{result['id']}: {result['behavior']} ({result['tool_name']} in {result['session_id'][:8]})"
        case "mode":
            return f"approval mode: {result['mode']}"
        case "credits_grant":
            return f"granted {result['granted']} to {result['participant']}: balance {result['balance']}"
        case "shutdown":
            return "daemon stopped" if result.get("stopped") else "daemon is shutting down"
        case "rebalance":
            lines = [f"moved {result['moved']} idle session(s)"]
            for one in result["daemons"]:
                moves = ", ".join(f"{len(sids)} to {target}" for target, sids in sorted((one.get("moved") or {}).items()))
                note = f"error: {one['error']}" if one.get("error") else (moves or "nothing to move")
                busy = f" ({one['kept_busy']} kept: mid-turn or starting)" if one.get("kept_busy") else ""
                lines.append(f"  {one.get('daemon_id')}: {note}{busy}")
            return "\n".join(lines)
    return json.dumps(result)


def show_result(cmd: str, result: Any, out: TextIO) -> None:
    """The reply to ``admin CMD`` for people: a table, indented fields or one line."""
    match cmd:
        case "sessions":
            show_sessions(result, out)
        case "session":
            show_session(result, out)
        case "approvals":
            show_approvals(result, out)
        case "agents":
            render_table(["NAME", "KIND", "PROVIDER", "MODEL", "PERMISSIONS", "TALKS TO", "SPENT $ (/CAP)",
                          "SESSION CAP $", "ID"],
                         [[a["name"], a.get("kind") or "(default)", a["provider"] or "(routed)",
                           a["model"] or "(default)", a["permission_mode"],
                           a.get("conversation_mode", "-"), _spend(a.get("spend_usd", 0.0), a.get("max_total_budget_usd")),
                           f"{a['max_budget_usd']:g}" if a.get("max_budget_usd") else "-", a["id"]] for a in result], out, keep=("NAME", "ID"))
        case "credits_balance":
            out.write(f"{safe_text(result['participant'])}: {result['balance']} credits\n")
            if result.get("transactions"):
                render_table(["WHEN", "TYPE", "AMOUNT", "BALANCE", "REFERENCE"],
                             [[_when(t.get("created_at")), t.get("type"), t.get("amount"),
                               t.get("balance_after"), t.get("reference")] for t in result["transactions"]], out)
        case "health" | "stats":
            show_mapping(result, out)
        case _:
            out.write(safe_text(_one_liner(cmd, result)) + "\n")
