"""``corvid-actors export-test``: a journaled session written as a replay test (issue 40).

Reads the journal straight from the store the config names (the daemon may be running:
SQLite in WAL mode, or PostgreSQL) and writes the module of
:func:`corvid_actors.testing.replay.export_test`. Loaded only when the command runs.
"""

from __future__ import annotations

import argparse
import sys

from corvid_actors.daemon.settings import load_daemon_config
from corvid_actors.db.journal import JournalStore
from corvid_actors.db.store import Store
from corvid_actors.errors import CorvidError
from corvid_actors.testing.replay import export_test


def export_test_command(args: argparse.Namespace) -> int:
    """``corvid-actors export-test ID… [-o FILE] [--redact MODULE:FUNC]``; the exit code."""
    config = load_daemon_config(args.config, data_dir=args.data_dir)
    store = Store(config.store.resolved_url())
    try:
        journaled = JournalStore(store, writer=False).sessions()
        chosen = []
        for given in args.sessions:
            matches = [s for s in journaled if s == given] or (
                [s for s in journaled if s.startswith(given)] if len(given) >= 4 else [])
            if len(matches) != 1:
                why = "matches several journaled sessions: give more of the id" if matches else (
                    "is not a journaled session (is [journal] enabled for its agent? `[journal] agents` "
                    "or `enabled = true`)")
                raise CorvidError(f"export-test: {given!r} {why}")
            chosen.append(matches[0])
        try:
            text = export_test(store, chosen[0] if len(chosen) == 1 else chosen, args.output, redact=args.redact)
        except ValueError as exc:
            raise CorvidError(f"export-test: {exc}") from None
    finally:
        store.close()
    if args.output:
        print(f"wrote {args.output}: python -m pytest {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
