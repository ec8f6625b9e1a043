"""The operator's subcommands: ``serve``, ``admin …``, ``events`` and ``run``.

:func:`add_operator_commands` adds them to the ``corvid-actors`` parser. ``admin`` and
``events`` talk to a running daemon over its socket (:mod:`corvid_actors.daemon.client`);
output is a table (rich when it is installed, aligned text otherwise) or, with
``--json``, the daemon's JSON result for scripts.

How replies are shown (text is data: control characters made visible, never markup) is
:mod:`corvid_actors.daemon.render`.
``admin send ID -`` reads the message from stdin (UTF-8; anything else is refused).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
from collections.abc import Callable
from typing import Any, TextIO

from corvid_actors.core.vocabulary import CONVERSATION_MODES
from corvid_actors.daemon.client import AdminClient, AdminUnavailable, NoDaemon
from corvid_actors.daemon.protocol import AGENT_KINDS, AGENT_PROVIDERS, PERMISSION_MODES
from corvid_actors.daemon.token_cli import add_token_parser
from corvid_actors.db.statuses import SESSION_STATUSES
from corvid_actors.errors import CorvidError

COMMON_HELP = "options: --data-dir DIR, --config FILE, --token TOKEN, --json"

# --- commands ------------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> AdminClient:
    # the configuration is loaded when a command runs (not for `--help`)
    from corvid_actors.daemon.settings import load_daemon_config

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
    client = _client(args)
    try:
        client.connect()
    except NoDaemon:
        if args.cmd != "shutdown" or not wait:
            raise
        # like `systemctl stop`: stopping what does not run succeeds, and says so
        result = {"shutting_down": False, "stopped": True, "running": False}
        out.write(json.dumps(result, indent=2) + "\n" if getattr(args, "json", False) else "not running\n")
        return 0
    with client:
        result = client.call(args.cmd, **call_args)
        if args.cmd in ("shutdown", "drain") and wait:
            client.wait_closed()
            _wait_exited(result.get("pid"), _shutdown_bound(args))
            result = {**result, "stopped": True}
    if getattr(args, "json", False):
        out.write(json.dumps(result, indent=2, default=str) + "\n")
        return 0
    from corvid_actors.daemon.render import show_result  # how replies look: once there is one

    show_result(args.cmd, result, out)
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
    from corvid_actors.daemon.settings import load_daemon_config

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


#: event types ``events`` leaves out unless ``--all-events`` (streamed text, thinking, usage)
QUIET_EVENTS = frozenset({"content_block_delta", "thinking", "context_usage"})
#: ``--since`` units
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``2h``, ``1d`` as seconds (argparse ``type``)."""
    text = text.strip().lower()
    scale = _DURATION_UNITS.get(text[-1:], None)
    number = text[:-1] if scale is not None else text
    try:
        seconds = float(number) * (scale or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (say 90s, 10m, 2h or 1d)") from None
    if not seconds > 0 or seconds != seconds:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive duration")
    return seconds


class _EventPrinter:
    """Writes items of ``events`` (history first, then live) and counts them for ``--limit``."""

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.args, self.out, self.seen = args, out, 0

    @property
    def done(self) -> bool:
        return bool(self.args.limit) and self.seen >= self.args.limit

    def write(self, item: dict[str, Any]) -> None:
        if "dropped" in item:
            self.out.write(f"({item['dropped']} events dropped: this follower fell behind)\n")
            return
        from corvid_actors.daemon.render import describe_event

        event = item["event"]
        if getattr(self.args, "json", False):
            self.out.write(json.dumps(item) + "\n")
        elif self.args.all_events or event["type"] not in QUIET_EVENTS:
            self.out.write(f"{item['at'][11:23]}Z  {item['session_id'][:8]}  {event['type']:<20} "
                           f"{describe_event(event)}\n")
        else:
            return
        self.out.flush()
        self.seen += 1


def _events(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``events [ID]``: with a session, its history first (``--since``, ``--tail``, or the
    current and last finished turn), then what happens next; a session that is not running
    prints its history and exits, unless ``--follow``."""
    printer = _EventPrinter(args, out or sys.stdout)
    with _client(args) as client:
        client.begin_follow(args.session)  # subscribed before the history is read: nothing falls between
        shown: set[str] = set()
        if args.session:
            with _client(args) as reader:
                history = reader.call("history", session=args.session, since_s=args.since, tail=args.tail)
            for item in history["events"]:
                printer.write(item)
                shown.add(json.dumps([item["at"], item["event"]], sort_keys=True))
                if printer.done:
                    return 0
            if not history["live"] and not args.follow:
                return 0
        for item in client.followed():
            if shown and "event" in item and json.dumps([item["at"], item["event"]], sort_keys=True) in shown:
                continue  # in the history already
            printer.write(item)
            if printer.done:
                break
    return 0


# ``serve`` and ``run`` load the runtime (providers' SDKs, actors, the store): imported when
# one of them runs, so that ``admin …`` and ``events`` start in a fraction of the time.


def _serve(args: argparse.Namespace) -> int:
    from corvid_actors.daemon.service import serve
    from corvid_actors.daemon.settings import ServeOptions

    return serve(ServeOptions(config_file=args.config, data_dir=args.data_dir, provider=args.provider,
                              log_format=args.log_format, log_level=args.log_level, stub_script=args.stub_script,
                              detach=args.detach, json=getattr(args, "json", False)))


def _run(args: argparse.Namespace) -> int:
    from corvid_actors.daemon.foreground import run_foreground

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
        p.add_argument("--conversation-mode", choices=CONVERSATION_MODES,
                       help="with --create: who may talk to the agent in chat (owners only, an allowlist, anyone)")
        p.add_argument("--max-budget-usd", type=float, help="with --create: what one session may spend (0: no cap)")
        p.add_argument("--max-total-budget-usd", type=float,
                       help="with --create: what all the agent's sessions may spend together (0: no cap)")
        p.add_argument("--kind", choices=AGENT_KINDS,
                       help="with --create: task (nudged to act with tools) or chat (converses); "
                            "default: [agents] default_kind")
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

    def drain(p: argparse.ArgumentParser) -> None:
        p.add_argument("--wait", action="store_true",
                       help="return only when the daemon has handed every session over and exited")

    def rebalance(p: argparse.ArgumentParser) -> None:
        p.add_argument("--daemon", help="only this daemon hands sessions over (default: every live daemon)")

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
        ("restart", "restart", "stop a session and resume it with its history, in one command", session),
        ("crash", "crash", "drill: make a session's running actor fail as on a bug (needs [daemon] "
                           "allow_fault_commands = true)", session),
        ("extend", "extend", "give a running session more time before its inactivity timeout", extend),
        ("approvals", "approvals", "list pending tool-use approvals", approvals),
        ("approve", "approve", "allow a pending tool use", approve),
        ("deny", "deny", "deny a pending tool use", deny),
        ("mode", "mode", "show or set the approval mode", mode),
        ("agents", "agents", "list agents", none),
        ("stats", "stats", "memory and actor statistics", none),
        ("health", "health", "daemon, actor and provider health (probes the model servers)", none),
        ("shutdown", "shutdown", "stop the daemon gracefully (sessions are marked for resume)", shutdown),
        ("drain", "drain", "several daemons: hand every session over to the others at a turn boundary, "
                           "then exit", drain),
        ("rebalance", "rebalance", "several daemons: hand idle sessions (never one mid-turn) over to the "
                                   "least-loaded daemons until the counts are within [cluster] "
                                   "rebalance_tolerance", rebalance),
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
    add_token_parser(admin_sub, common)

    events = sub.add_parser(
        "events", parents=[common], help="a session's recent events, then live ones (like tail -f)",
        description="With a session: print its recent history (from the store's messages and exit notes, and the "
        "daemon's in-memory ring of recent events) — by default the current turn and the last finished one — then "
        "follow it until Ctrl-C or the daemon stops; a session that is not running prints its history and exits 0 "
        "(--follow waits for it to run again). Without one: every session's events as they happen.")
    events.add_argument("session", metavar="ID", nargs="?", help="only this session (default: all)")
    events.add_argument("--since", type=parse_duration, metavar="DURATION",
                        help="with ID: the history of the last DURATION (90s, 10m, 2h, 1d)")
    events.add_argument("--tail", type=int, metavar="N", help="with ID: the last N items of the history")
    events.add_argument("--follow", action="store_true",
                        help="with ID: keep following a session that is not running (until it runs again and after)")
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
