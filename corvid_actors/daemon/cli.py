"""The ``corvid-actors`` command line.

Every failure is one line naming the problem and what to do, with a non-zero exit code
(under ``--json``: ``{"ok": false, "error": ...}`` on stdout); a traceback is a bug.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from loguru import logger

from corvid_actors.daemon.admin_cli import add_json_flag, add_operator_commands
from corvid_actors.daemon.settings import package_version
from corvid_actors.errors import CorvidError


class UsageError(CorvidError):
    """The command line itself is wrong (argparse's complaint); exit code 2."""

    def __init__(self, message: str, usage: str = "") -> None:
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised (so ``main`` can print it as JSON under ``--json``)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}{nearest_choice(message)} (see `{self.prog} --help`)",
                         self.format_usage())


def nearest_choice(message: str) -> str:
    """``; did you mean 'serve'?`` for argparse's "invalid choice: 'sevre' (choose from …)",
    when one of the choices is close enough; "" otherwise."""
    found = _INVALID_CHOICE.search(message)
    if found is None:
        return ""
    choices = re.findall(r"'([^']*)'", found.group(2))
    close = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=_CLOSE_ENOUGH)
    return f"; did you mean {close[0]!r}?" if close else ""


#: argparse's complaint about an unknown subcommand or choice (Python 3.11–3.13 wording)
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
#: how alike a typo and a command must be (difflib's ratio) to be suggested
_CLOSE_ENOUGH = 0.6


def _demo(args: argparse.Namespace) -> int:
    from corvid_actors.daemon.demo import run_demo  # the runtime: loaded when the demo runs

    run_demo(sys.stdout, db_path=Path(args.db) if args.db else None, minutes=args.minutes, keep=args.keep,
             json_output=getattr(args, "json", False))
    return 0


def _export_test(args: argparse.Namespace) -> int:
    from corvid_actors.daemon.export_cli import export_test_command  # the store, the replay: now

    return export_test_command(args)


def build_parser() -> argparse.ArgumentParser:
    """The ``corvid-actors`` parser: ``demo`` and the operator's commands (:mod:`~corvid_actors.daemon.admin_cli`)."""
    parser = _Parser(
        prog="corvid-actors",
        description="Supervised Pykka actors hosting long-running LLM agent sessions.",
    )
    parser.add_argument("--version", action="version", version=f"corvid-actors {package_version()}")
    parser.add_argument("--json", action="store_true", default=False,
                        help="machine-readable JSON output (also accepted after the subcommand)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    demo = sub.add_parser(
        "demo",
        help="run the built-in supervision scenario (scripted model, simulated time) and print its timeline",
        description="Start the runtime on SQLite with a scripted model; run several sessions; crash one "
        "(auto-restart with backoff) and pause one on a simulated outage (auto-resume); print the timeline.",
    )
    demo.add_argument("--db", help="SQLite file to use (default: a fresh temporary file, removed at exit)")
    demo.add_argument("--minutes", type=float, default=30.0, help="simulated minutes to run (default 30)")
    demo.add_argument("--keep", action="store_true", help="keep the temporary directory (database, workspace)")
    add_json_flag(demo)
    demo.set_defaults(func=_demo)
    add_operator_commands(sub)  # serve, admin …, events, run
    export = sub.add_parser(
        "export-test", help="write a journaled session as a replay test (pytest module)",
        description="Read the session's journal ([journal] enabled, or its agent in [journal] agents) and write a "
        "self-contained pytest module that replays it in simulated time: the recorded model responses, tool "
        "results, user messages and approvals; it fails at the first divergent call or event. Secrets are "
        "redacted as in the logs, then by --redact.")
    export.add_argument("sessions", metavar="ID", nargs="+",
                        help="session id (or its first characters, at least 4); several: replayed together")
    export.add_argument("-o", "--output", help="the file to write (default: stdout)")
    export.add_argument("--redact", metavar="MODULE:FUNC",
                        help="your own redaction: a function str -> str applied to every recorded text")
    export.add_argument("--data-dir", help="the daemon's data directory (default: store.data_dir, CORVID_DATA_DIR)")
    export.add_argument("--config", help="a TOML config file (default: $CORVID_CONFIG)")
    add_json_flag(export)
    export.set_defaults(func=_export_test)
    return parser


def undecodable_argument(argv: Sequence[str]) -> str | None:
    """A one-line error for the first argument that is not valid UTF-8, else None.

    Python hands undecodable bytes over as lone surrogates (``surrogateescape``); such
    text cannot be stored or sent, so it is refused here — before anything is created —
    rather than stored lossily or failing halfway through a command."""
    for number, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as exc:
            shown = arg.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
            return (f"argument {number} ({shown!r}) is not valid UTF-8 text (byte {exc.start}): "
                    "nothing was done; pass UTF-8 text (check the terminal's locale)")
    return None


def _fail(message: str, code: int, json_output: bool) -> int:
    if json_output:
        print(json.dumps({"ok": False, "error": message}))
    else:
        print(message if message.startswith("corvid-actors") else f"corvid-actors: {message}", file=sys.stderr)
    return code


def _quiet_stdout() -> None:
    """After a broken pipe (``… | head``): send what is left to /dev/null, so the
    interpreter's final flush does not complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (tests)
        pass
    finally:
        os.close(devnull)


def _show_warnings() -> int:
    """The package is silent as a library (logger.disable in corvid_actors/__init__); its
    own command line shows its warnings on stderr (`serve` configures its own logs)."""
    from corvid_actors.daemon.process import human_format

    try:
        logger.remove(0)  # loguru's default DEBUG handler, when it is still there
    except ValueError:
        pass
    sink = logger.add(sys.stderr, level="WARNING", format=human_format, colorize=None)
    logger.enable("corvid_actors")
    return sink


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line (``sys.argv[1:]`` by default); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    json_output = "--json" in argv  # until the parser says more: a usage error must honour it too
    problem = undecodable_argument(argv)
    if problem is not None:
        return _fail(problem, 2, json_output)
    parser = build_parser()
    sink: int | None = None
    try:
        args = parser.parse_args(argv)  # `--help` and `--version` end here: nothing else loaded
        json_output = bool(getattr(args, "json", False))
        if not getattr(args, "func", None):
            if json_output:
                return _fail("no command given; see `corvid-actors --help`", 2, True)
            parser.print_help()
            return 2
        sink = _show_warnings()
        return int(args.func(args))
    except UsageError as exc:
        if not json_output:
            sys.stderr.write(exc.usage)
        return _fail(str(exc), 2, json_output)
    except CorvidError as exc:
        return _fail(str(exc), 1, json_output)
    except BrokenPipeError:
        _quiet_stdout()
        return 141  # as a program killed by SIGPIPE: the reader stopped reading
    except KeyboardInterrupt:
        return 130
    finally:
        if sink is not None:
            logger.disable("corvid_actors")
            try:
                logger.remove(sink)
            except ValueError:  # `serve` replaced every handler with its own
                pass

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
