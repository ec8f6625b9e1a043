"""The ``corvid-actors`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from corvid_actors.admin_cli import add_operator_commands
from corvid_actors.errors import CorvidError


def _demo(args: argparse.Namespace) -> int:
    from corvid_actors.demo import run_demo

    run_demo(sys.stdout, db_path=Path(args.db) if args.db else None, minutes=args.minutes)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="corvid-actors",
        description="Supervised Pykka actors hosting long-running LLM agent sessions.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="run the built-in supervision scenario (scripted model, simulated time) and print its timeline",
        description="Start the runtime on SQLite with a scripted model; run several sessions; crash one "
        "(auto-restart with backoff) and pause one on a simulated outage (auto-resume); print the timeline.",
    )
    demo.add_argument("--db", help="SQLite file to use (default: a fresh temporary file)")
    demo.add_argument("--minutes", type=float, default=30.0, help="simulated minutes to run (default 30)")
    demo.set_defaults(func=_demo)
    add_operator_commands(sub)  # serve, admin …, events, run
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    problem = undecodable_argument(argv)
    if problem is not None:
        print(f"corvid-actors: {problem}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except CorvidError as exc:
        print(f"corvid-actors: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
