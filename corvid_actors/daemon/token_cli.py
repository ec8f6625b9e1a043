"""``corvid-actors admin token create|list|revoke``: the HTTP API's bearer tokens.

These commands open the daemon's store directly (the data directory's SQLite file, or
PostgreSQL by URL), not the admin socket: a token can be made before the daemon starts —
it must be, for a listener on a non-loopback address — and a revocation takes effect at
the running daemon's next request (it reads the active tokens on each one).
``create`` prints the secret once; only its SHA-256 is stored.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from corvid_actors.clock import RealClock

#: ``db.api_tokens.TOKEN_SCOPES`` (not imported: `--help` loads no store; a test keeps them equal)
SCOPES = ("read", "operate")


def _tokens(args: argparse.Namespace) -> Any:
    # the store (peewee) and the configuration load when a token command runs, not for `--help`
    from corvid_actors.daemon.settings import load_daemon_config
    from corvid_actors.db.api_tokens import ApiTokenStore
    from corvid_actors.runtime.tree import open_store

    config = load_daemon_config(args.config, data_dir=args.data_dir)
    clock = RealClock()
    return ApiTokenStore(open_store(config, clock)), clock


def _run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    tokens, clock = _tokens(args)
    try:
        if args.token_command == "create":
            secret = tokens.create(args.name, args.scope, now=clock.now())
            result: Any = {"name": args.name, "scope": args.scope, "token": secret}
            text = (f"API token {args.name!r} ({args.scope}) created. It is shown this once; keep it secret:\n"
                    f"{secret}\n")
        elif args.token_command == "list":
            result = tokens.list_tokens()
            rows = [f"{t['name']:<24} {t['scope']:<8} created {t['created_at']}  last used {t['last_used_at'] or '-'}"
                    + (f"  REVOKED {t['revoked_at']}" if t["revoked_at"] else "") for t in result]
            text = "\n".join(rows) + "\n" if rows else "no API tokens (create one: admin token create --name NAME)\n"
        else:
            changed = tokens.revoke(args.name, now=clock.now())
            result = {"name": args.name, "revoked": True, "changed": changed}
            text = f"API token {args.name!r} revoked\n" if changed else f"API token {args.name!r} was revoked already\n"
    finally:
        tokens.store.close()
    out.write(json.dumps(result, indent=2) + "\n" if args.json else text)
    return 0


def add_token_parser(admin_sub: Any, common: argparse.ArgumentParser) -> None:
    """``admin token …`` under the ``admin`` subparsers."""
    token = admin_sub.add_parser("token", help="the HTTP API's bearer tokens (create, list, revoke)",
                                 description="Bearer tokens of the HTTP API ([http] listen), stored hashed in the "
                                 "daemon's database. Works whether or not the daemon runs.")
    sub = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = sub.add_parser("create", parents=[common], help="create a token and print it (once)")
    create.add_argument("--name", required=True, help="the token's name (logged with every request it makes)")
    create.add_argument("--scope", choices=SCOPES, default="read",
                        help="read: look only (GET); operate: also start, send, stop, approve … (default read)")
    sub.add_parser("list", parents=[common], help="the tokens: name, scope, created, last used, revoked")
    revoke = sub.add_parser("revoke", parents=[common], help="revoke a token (at once, also for a running daemon)")
    revoke.add_argument("name")
    token.set_defaults(func=_run)
