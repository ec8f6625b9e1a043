"""The environment a tool subprocess gets: an allowlist plus the project's own variables.

The daemon's environment holds secrets (model API keys, wallet keys, database URLs); a
command the model writes must never see them. So a subprocess gets only the variables
named in :data:`ENV_ALLOWLIST`, read from the daemon's environment, plus the variables
the project itself declares (which the project owner put there on purpose, so they are
passed as they are, secret-looking or not). Nothing else, whatever its name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

#: Names that look like secrets. Used to keep the allowlist honest (a test asserts no
#: allowlisted name matches); project variables are NOT filtered by it.
#: Matched on ``_``-separated words so ``GIT_AUTHOR_NAME`` is not mistaken for ``AUTH``.
SECRET_NAME_PATTERN = re.compile(
    r"(?:^|_)(?:KEY|APIKEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|PASS|MNEMONIC"
    r"|SEED|CREDENTIALS?|PRIVATE|AUTH|COOKIE)(?:_|$)",
    re.IGNORECASE,
)

#: Variables passed from the daemon's environment to tool subprocesses.
#:
#: The union of the original's two lists (the SDK process's ``ENV_ALLOWLIST`` and the
#: coding tools' ``buildSafeEnvForCoding``) minus the secret-looking names, which the
#: original passed and we do not:
#:
#: * ``ANTHROPIC_API_KEY`` — the SDK list had it because the Claude SDK *itself* ran as
#:   that subprocess and needed the key. Here the Anthropic provider runs in-process
#:   and gets its key explicitly, so a tool subprocess (a shell command the model wrote)
#:   has no use for it, and passing it would let the model read and exfiltrate it.
#: * ``GH_TOKEN`` / ``GITHUB_TOKEN`` — a token with push rights is a secret too. A
#:   project whose commands need ``gh`` declares the token in its own variables, which
#:   are always passed; the daemon's own token never leaks to every project.
ENV_ALLOWLIST: frozenset[str] = frozenset(
    {
        # process basics
        "PATH",
        "HOME",
        "USER",
        "SHELL",
        "TERM",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TMPDIR",
        "EDITOR",
        "VISUAL",
        # XDG directories
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
        "XDG_RUNTIME_DIR",
        # toolchains
        "NODE_ENV",
        "NODE_PATH",
        "BUN_INSTALL",
        "CLAUDE_CODE_STREAM_CLOSE_TIMEOUT",
        "OLLAMA_HOST",
        "ANTHROPIC_BASE_URL",
        # git identity
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        # Windows equivalents of HOME/TMPDIR/PATH lookup
        "USERPROFILE",
        "HOMEDRIVE",
        "HOMEPATH",
        "APPDATA",
        "LOCALAPPDATA",
        "SystemRoot",
        "COMSPEC",
        "PATHEXT",
    }
)


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name looks like it holds a secret."""
    return SECRET_NAME_PATTERN.search(name) is not None


def safe_env(
    project_env: Mapping[str, str] | None,
    base: Mapping[str, str] | None = None,
    allowlist: Iterable[str] = ENV_ALLOWLIST,
) -> dict[str, str]:
    """The complete environment for a tool subprocess.

    ``base`` (default: ``os.environ``) contributes only the ``allowlist`` names it has;
    ``project_env`` (the project's own variables) is laid on top, so a project can
    set or override any variable for its own commands. Values are stringified;
    ``None`` values are dropped.
    """
    source = os.environ if base is None else base
    # Every session build makes this environment: look up only the allowlisted names the
    # source has (os.environ.get of an absent name raises and catches a KeyError inside:
    # ~35 of those per build cost 10x the intersection).
    wanted = allowlist if isinstance(allowlist, (set, frozenset)) else set(allowlist)
    env = {name: str(source[name]) for name in wanted.intersection(source) if source[name] is not None}
    for name, value in (project_env or {}).items():
        if value is not None:
            env[str(name)] = str(value)
    return env
