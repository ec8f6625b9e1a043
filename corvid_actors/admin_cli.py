"""The operator's subcommands: ``serve``, ``admin …``, ``events`` and ``run``.

:func:`add_operator_commands` adds them to the ``corvid-actors`` parser. ``admin`` and
``events`` talk to a running daemon over its socket (:mod:`corvid_actors.admin_client`);
output is a table (rich when it is installed, aligned text otherwise) or, with
``--json``, the daemon's JSON result for scripts.

Text is data: session names, commands, model, tool and agent text are shown exactly as
stored — rich cells are ``Text`` objects, never markup — and control characters (terminal
escapes) are shown as ``\\x1b``-style escapes instead of being sent to the terminal.
``admin send ID -`` reads the message from stdin (UTF-8; anything else is refused).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from corvid_actors.admin_client import AdminClient, AdminUnavailable
from corvid_actors.admin_protocol import AGENT_PROVIDERS, PERMISSION_MODES, SESSION_STATUSES
from corvid_actors.errors import CorvidError

COMMON_HELP = "options: --data-dir DIR, --config FILE, --token TOKEN, --json"

# --- rendering -----------------------------------------------------------------------------


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


def _short(value: Any, width: int = 60) -> str:
    text = safe_text(" ".join(str(value or "").split()))
    return text if len(text) <= width else text[: width - 1] + "…"


def show_sessions(rows: list[dict[str, Any]], out: TextIO) -> None:
    if not rows:
        out.write("no sessions\n")
        return
    render_table(
        ["ID", "NAME", "STATUS", "AGENT", "SOURCE", "UPTIME", "RESTARTS", "PAUSED UNTIL", "APPROVALS", "COST $",
         "TURNS"],
        [[r["id"][:8], _short(r["name"], 24), r["status"] + ("*" if r.get("restart_pending") else ""), r["agent"],
          r["source"], _duration(r["uptime_s"]), r["restarts"], _when(r["paused_until"]),
          r["pending_approvals"], f"{r['cost_usd']:.4f}", r["turns"]] for r in rows],
        out, keep=("ID", "AGENT"),
    )


def show_session(s: dict[str, Any], out: TextIO) -> None:
    # The pid is the runtime's own counter, not an OS process: it stays in --json only.
    for key in ("id", "name", "status", "agent", "source", "participant", "provider", "uptime_s",
                "timeout_s", "restarts", "paused_until", "restart_pending", "cost_usd", "turns", "created_at"):
        value = s.get(key)
        if key.endswith("_s"):
            key, value = key[:-2], _duration(value)
        out.write(f"{key + ':':<17}{'-' if value in (None, '') else safe_text(value)}\n")
    if s["approvals"]:
        out.write("\npending approvals:\n")
        show_approvals(s["approvals"], out)
    out.write("\nrecent messages:\n")
    render_table(["ROLE", "CONTENT"], [[m["role"], _short(m["content"], 100)] for m in s["messages"]], out)
    out.write("\nrecent events:\n")
    render_table(["AT", "EVENT", "DETAIL"],
                 [[e["at"][11:23] + "Z", e["type"], describe_event(e)] for e in s["events"]], out)


def show_approvals(rows: list[dict[str, Any]], out: TextIO) -> None:
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
    from corvid_actors.actors._admin_views import LIFECYCLE_LOG

    rule = LIFECYCLE_LOG.get(event["type"])
    if rule is not None:
        return safe_text(rule[1](event))
    if event["type"] == "content_block_delta":
        return json.dumps(event.get("text", ""), ensure_ascii=False)
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
        case "resume":
            return f"{result['session'][:8]}: {result['how'].replace('_', ' ')}"
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
    return json.dumps(result)


# --- commands ------------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> AdminClient:
    from corvid_actors.daemon import load_daemon_config

    config = load_daemon_config(args.config, data_dir=args.data_dir)
    client = AdminClient.for_config(config)
    if args.token:
        client.token = args.token
    return client


def _admin(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    call_args = {k: getattr(args, k) for k in args.call_args}
    wait = call_args.pop("wait", False)
    if args.cmd == "send":
        call_args["text"] = read_message_text(call_args["text"], sys.stdin)
    with _client(args) as client:
        result = client.call(args.cmd, **call_args)
        if args.cmd == "shutdown" and wait:
            client.wait_closed()
            _wait_exited(result.get("pid"), _shutdown_bound(args))
            result = {**result, "stopped": True}
    if getattr(args, "json", False):
        out.write(json.dumps(result, indent=2, default=str) + "\n")
        return 0
    match args.cmd:
        case "sessions":
            show_sessions(result, out)
        case "session":
            show_session(result, out)
        case "approvals":
            show_approvals(result, out)
        case "agents":
            render_table(["NAME", "PROVIDER", "MODEL", "PERMISSIONS", "ID"],
                         [[a["name"], a["provider"] or "(routed)", a["model"] or "(default)", a["permission_mode"],
                           a["id"]] for a in result], out)
        case "credits_balance":
            out.write(f"{safe_text(result['participant'])}: {result['balance']} credits\n")
            if result.get("transactions"):
                render_table(["WHEN", "TYPE", "AMOUNT", "BALANCE", "REFERENCE"],
                             [[_when(t.get("created_at")), t.get("type"), t.get("amount"),
                               t.get("balance_after"), t.get("reference")] for t in result["transactions"]], out)
        case "health" | "stats":
            show_mapping(result, out)
        case _:
            out.write(safe_text(_one_liner(args.cmd, result)) + "\n")
    return 0


def read_message_text(text: str, stdin: TextIO) -> str:
    """``text``, or with ``-`` the whole of stdin (UTF-8, else a one-line error)."""
    if text != "-":
        return text
    raw = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode("utf-8", "surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorvidError(f"the message on stdin is not valid UTF-8 (byte {exc.start}): nothing was sent") from None


def _shutdown_bound(args: argparse.Namespace) -> float:
    from corvid_actors.daemon import load_daemon_config

    d = load_daemon_config(args.config, data_dir=args.data_dir).daemon
    return d.shutdown_timeout_s + d.admin_client_timeout_s


def _wait_exited(pid: Any, bound_s: float) -> None:
    """Return once process ``pid`` has exited (a pidfd becomes readable then: no polling).

    Without pidfds (not Linux) the closed admin connection is all we can wait for."""
    if not isinstance(pid, int) or not hasattr(os, "pidfd_open"):
        return
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # already gone
    except OSError:  # no pidfd support in this kernel
        return
    try:
        ready, _, _ = select.select([fd], [], [], bound_s)
    finally:
        os.close(fd)
    if not ready:
        raise AdminUnavailable(f"the daemon (pid {pid}) has not exited within {bound_s:g} s; "
                               f"see its log, or stop it with `kill {pid}`")


def _events(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    quiet = {"content_block_delta", "thinking", "context_usage"}
    seen = 0
    with _client(args) as client:
        for item in client.follow(args.session):
            if "dropped" in item:
                out.write(f"({item['dropped']} events dropped: this follower fell behind)\n")
                continue
            event = item["event"]
            if getattr(args, "json", False):
                out.write(json.dumps(item) + "\n")
            elif args.all_events or event["type"] not in quiet:
                out.write(f"{item['at'][11:23]}Z  {item['session_id'][:8]}  {event['type']:<20} "
                          f"{describe_event(event)}\n")
            else:
                continue
            out.flush()
            seen += 1
            if args.limit and seen >= args.limit:
                break
    return 0


def _serve(args: argparse.Namespace) -> int:
    from corvid_actors.daemon import ServeOptions, serve

    return serve(ServeOptions(config_file=args.config, data_dir=args.data_dir, provider=args.provider,
                              log_format=args.log_format, log_level=args.log_level, stub_script=args.stub_script,
                              detach=args.detach, json=getattr(args, "json", False)))


def _run(args: argparse.Namespace) -> int:
    from corvid_actors.foreground import run_foreground

    return run_foreground(agent=args.agent, prompt=args.prompt, config_file=args.config, data_dir=args.data_dir,
                          provider=args.provider, create=args.create, model=args.model,
                          json_output=getattr(args, "json", False))


# --- parser --------------------------------------------------------------------------------


def _location(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="the daemon's data directory (default: store.data_dir, CORVID_DATA_DIR)")
    parser.add_argument("--config", help="a TOML config file (default: $CORVID_CONFIG)")


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    _location(common)
    common.add_argument("--token", help="admin token, when the daemon requires one (default: CORVID_ADMIN_TOKEN)")
    add_json_flag(common)
    return common


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """``--json``, accepted before and after the subcommand: a subcommand's copy defaults to
    SUPPRESS, so it never overwrites the top-level flag's value."""
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="machine-readable JSON output; errors as {\"ok\": false, \"error\": ...}")


#: admin subcommand -> (socket command, help, argument adders)
def _admin_commands() -> list[tuple[str, str, str, Callable[[argparse.ArgumentParser], None]]]:
    def none(p: argparse.ArgumentParser) -> None:
        pass

    def session(p: argparse.ArgumentParser) -> None:
        p.add_argument("session", metavar="ID", help="session id (or its first characters, at least 4)")

    def sessions(p: argparse.ArgumentParser) -> None:
        p.add_argument("--status", choices=SESSION_STATUSES, help="only sessions in this status")
        p.add_argument("--limit", type=int, help="at most this many, newest first (default daemon.session_list_limit)")

    def one_session(p: argparse.ArgumentParser) -> None:
        session(p)
        p.add_argument("--events", type=int, help="how many recent events to show")
        p.add_argument("--messages", type=int, help="how many recent messages to show")

    def start(p: argparse.ArgumentParser) -> None:
        p.add_argument("--agent", required=True, help="agent name or id (see `admin agents`)")
        p.add_argument("--create", action="store_true",
                       help="create the agent when there is none of that name (with the options below)")
        p.add_argument("--provider", choices=AGENT_PROVIDERS, help="with --create: the agent's provider")
        p.add_argument("--model", help="with --create: the agent's model")
        p.add_argument("--permission-mode", choices=PERMISSION_MODES, help="with --create: the agent's permissions")
        p.add_argument("--source", help="session source: web (default), chat (crash auto-restart), …")
        p.add_argument("--name", help="a name for the session")
        p.add_argument("--participant", help="who the session talks to (credits are charged to them)")
        p.add_argument("prompt", help="the first user message")

    def send(p: argparse.ArgumentParser) -> None:
        session(p)
        p.add_argument("text", help="the message (persisted before the daemon answers); - reads it from stdin "
                                    "(UTF-8, up to daemon.admin_max_send_bytes, 8 MiB by default)")

    def extend(p: argparse.ArgumentParser) -> None:
        session(p)
        p.add_argument("minutes", type=float, help="stop after this many minutes from now unless the session is active again "
                                                "(capped at 4x the default timeout)")

    def approvals(p: argparse.ArgumentParser) -> None:
        p.add_argument("--session", help="only this session's requests")

    def approve(p: argparse.ArgumentParser) -> None:
        p.add_argument("approval", metavar="ID", help="approval id (or a unique prefix of at least 4 characters)")
        p.add_argument("--session-wide", action="store_true", help="allow this tool for the rest of the session")
        p.add_argument("--message", help="a note passed to the session")

    def deny(p: argparse.ArgumentParser) -> None:
        p.add_argument("approval", metavar="ID", help="approval id (or a unique prefix of at least 4 characters)")
        p.add_argument("--message", help="what the model is told")

    def mode(p: argparse.ArgumentParser) -> None:
        p.add_argument("mode", nargs="?", choices=["normal", "queued", "paused"],
                       help="normal (requests time out), queued (wait for a human), paused (deny all); "
                            "omit to show the current mode")

    def shutdown(p: argparse.ArgumentParser) -> None:
        p.add_argument("--reason", help="written to the daemon's log")
        p.add_argument("--wait", action="store_true",
                       help="return only when the daemon has finished shutting down (its bound applies)")

    return [
        ("sessions", "sessions", "list sessions: status, agent, source, uptime, restarts, approvals, cost, turns",
         sessions),
        ("session", "session", "one session: facts, pending approvals, recent messages and events", one_session),
        ("start", "start", "create a session of an agent and start it with a prompt", start),
        ("send", "send", "send a message to a session (resumes it with history when it has ended)", send),
        ("stop", "stop", "stop a session (reason user_stop)", session),
        ("resume", "resume", "resume a session: a paused one now, an ended one with its history", session),
        ("extend", "extend", "give a running session more time before its inactivity timeout", extend),
        ("approvals", "approvals", "list pending tool-use approvals", approvals),
        ("approve", "approve", "allow a pending tool use", approve),
        ("deny", "deny", "deny a pending tool use", deny),
        ("mode", "mode", "show or set the approval mode", mode),
        ("agents", "agents", "list agents", none),
        ("stats", "stats", "memory and actor statistics", none),
        ("health", "health", "daemon, actor and provider health (probes the model servers)", none),
        ("shutdown", "shutdown", "stop the daemon gracefully (sessions are marked for resume)", shutdown),
    ]


def _credits_parser(admin_sub: Any, common: argparse.ArgumentParser) -> None:
    credits = admin_sub.add_parser("credits", help="show balances and grant credits",
                                   description="Credits of chat participants (needs daemon.with_credits).")
    sub = credits.add_subparsers(dest="credits_command", metavar="ACTION", required=True)
    balance = sub.add_parser("balance", parents=[common], help="a participant's balance")
    balance.add_argument("participant")
    balance.add_argument("--transactions", type=int, help="also show this many recent transactions")
    balance.set_defaults(func=_admin, cmd="credits_balance", call_args=("participant", "transactions"))
    grant = sub.add_parser("grant", parents=[common], help="grant credits to a participant")
    grant.add_argument("participant")
    grant.add_argument("amount", type=int)
    grant.add_argument("--reason", help="recorded with the transaction")
    grant.set_defaults(func=_admin, cmd="credits_grant", call_args=("participant", "amount", "reason"))


def add_operator_commands(sub: Any) -> None:
    """Add ``serve``, ``admin``, ``events`` and ``run`` to the top-level subparsers."""
    serve = sub.add_parser(
        "serve", help="run the daemon: sessions, supervision and the admin socket",
        description="Run corvid-actors as a long-running daemon on SQLite in the data directory (PostgreSQL by "
        "CORVID_DB_URL). Without a real model server (Ollama answering at OLLAMA_HOST, or ANTHROPIC_API_KEY) it "
        "starts the built-in stub model and says so. SIGTERM/SIGINT stop it gracefully; a second SIGINT forces exit.",
    )
    _location(serve)
    serve.add_argument("--provider", choices=["auto", "ollama", "anthropic", "stub"],
                       help="model server: auto (default: real when configured, else the stub), or force one")
    serve.add_argument("--log-format", choices=["human", "json"], help="log lines on stderr (default human)")
    serve.add_argument("--log-level", help="DEBUG, INFO (default), WARNING, …")
    serve.add_argument("--stub-script", help="JSON list of scripted turns for the stub model (demos, tests)")
    serve.add_argument("--detach", action="store_true",
                       help="run in the background (log in DATA_DIR/daemon.log); return once it is ready")
    add_json_flag(serve)
    serve.set_defaults(func=_serve)

    common = _common()
    admin = sub.add_parser("admin", help="control a running daemon (sessions, approvals, credits, health)",
                           description=f"Operator commands over the daemon's admin socket; {COMMON_HELP}.")
    admin_sub = admin.add_subparsers(dest="admin_command", metavar="COMMAND", required=True)
    for name, cmd, help_text, add_args in _admin_commands():
        p = admin_sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        add_args(p)
        call_args = tuple(a.dest for a in p._actions if a.dest not in {"help", "data_dir", "config", "token", "json"})
        if name == "start":  # --create is sent only when given: older daemons reject unknown arguments
            p.set_defaults(create=None)
        p.set_defaults(func=_admin, cmd=cmd, call_args=call_args)
    _credits_parser(admin_sub, common)

    events = sub.add_parser("events", parents=[common], help="follow live events (like tail -f)",
                            description="Print session events as they happen, until Ctrl-C or the daemon stops.")
    events.add_argument("session", metavar="ID", nargs="?", help="only this session (default: all)")
    events.add_argument("--all-events", action="store_true", help="include streamed text deltas and thinking")
    events.add_argument("--limit", type=int, help="exit after this many events")
    events.set_defaults(func=_events)

    run = sub.add_parser("run", help="run one session in the foreground, streaming the reply",
                         description="Start a session of an agent with a prompt against the configured model "
                         "server and stream the answer to the terminal; exits when the turn ends.")
    _location(run)
    run.add_argument("--agent", required=True, help="agent name or id (see `admin agents`)")
    run.add_argument("--create", action="store_true", help="create the agent when there is none of that name")
    run.add_argument("--model", help="with --create: the agent's model")
    add_json_flag(run)
    run.add_argument("--provider", choices=["auto", "ollama", "anthropic", "stub"], default="auto",
                     help="auto (as configured; default), force ollama or anthropic, or the built-in stub")
    run.add_argument("prompt", help="the message to send")
    run.set_defaults(func=_run)
