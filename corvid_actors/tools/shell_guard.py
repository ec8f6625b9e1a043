"""Static checks of a shell command before ``run_command`` runs it.

Two questions, both answered without running anything:

* :func:`protected_write_target` — does the command touch a protected path? Like the
  original's ``isProtectedBashCommand``, ANY mention of a protected path blocks the
  command, reads included (``cat .env`` would hand the secret to the model). Mentions
  are found quote-aware (``'.e''nv'`` is ``.env``), inside redirections (``2>.env``,
  ``>.env``), option values (``of=.env``, ``-o.env``, ``--output=.env``), globs and
  braces the shell would expand (``.e*``, ``.{env,x}``), ANSI-C strings, and nested
  command strings (``sh -c``, ``eval``, interpreter one-liners, ``$(…)``). On top of
  mentions, bulk operations are checked structurally: a recursive delete, move,
  permission change or copy whose tree contains a protected path (``rm -rf .``,
  ``find . -delete``, ``git clean -fdx``, ``chmod -R``, ``rsync --delete``) is blocked
  although it names nothing protected.
* :func:`blocked_command` — is the command outright dangerous to the machine (sudo,
  ``rm -rf /``, mkfs, dd to a device, shutdown/reboot, killall, ``chmod 777 /``)?

This is a best-effort static guard, not a sandbox: a command can compute a name at run
time (``$(printf …)``, base64) or read a protected file through a recursive read
(``grep -r``). Parameter expansions are read as the shell would with the variables unset
(``rm ${TARGET:-.env}`` names ``.env``). The wall is the OS sandbox every command runs in
(``corvid_actors.tools.sandbox``: protected files masked, the host read-only); this guard
is the second, advisory layer, and the only one where no sandbox can run. Secrets in the
daemon's environment are kept out by the environment allowlist
(``corvid_actors.tools.env``), which does not depend on parsing.
"""

from __future__ import annotations

import codecs
import glob
import itertools
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from corvid_actors.tools.paths import (
    DEFAULT_PROTECTED_PATTERNS,
    CompiledPatterns,
    TreeTooLarge,
    compile_patterns,
    is_within,
    protected_match,
    walk_tree,
)
from corvid_actors.tools.shell_parse import (
    SimpleCommand,
    command_name,
    is_operator,
    lex,
    nested_strings,
    parse,
    split_simple,
)


@dataclass(frozen=True)
class GuardSettings:
    """Bounds that keep the guard fast on any command and any project size."""

    #: entries visited when checking a bulk operation's tree; past it, the command is
    #: refused because it cannot be shown safe
    walk_max_entries: int = 300_000
    #: dependency and cache trees a bulk check does not look into: they hold vendored
    #: fixtures (``key.pem``, ``.env.example``) but no project secrets, and deleting
    #: them is routine (``rm -rf node_modules``). A direct mention is still caught.
    walk_skip_dirs: tuple[str, ...] = (
        "node_modules", ".venv", "venv", "__pycache__", ".tox", ".nox",
        ".mypy_cache", ".pytest_cache", ".ruff_cache",
    )
    #: nested command strings followed (sh -c "bash -c '…'")
    nesting_max_depth: int = 4
    #: paths a glob may expand to before we stop looking
    glob_max_matches: int = 1_000
    #: words a brace expression may expand to
    brace_max_expansions: int = 256


#: a path-like run of characters inside any word: splits ``of=.env``, ``open('.env')``
_PATH_RUN = re.compile(r"[\w.\-/~+@%*?\[\]{},]+")
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'")
#: ``${NAME:-word}``, ``${NAME=word}``, ``${NAME:+word}``… : the word the shell may use
_PARAMETER_WORD = re.compile(r"\$\{[#!]?[A-Za-z_][A-Za-z0-9_]*(?::?[-=+?])([^{}]*)\}")
_BRACE = re.compile(r"\{([^{}]*,[^{}]*)\}")
_GLOB_CHARS = re.compile(r"[*?\[]")
_PRIVILEGE = frozenset({"sudo", "doas", "su", "pkexec", "run0"})
_FIND_ACTIONS = frozenset({"-delete", "-exec", "-execdir", "-ok", "-okdir"})
_SAFE_DEVICES = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/")
_FORK_BOMB = re.compile(r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:")



# --- mentions -------------------------------------------------------------------------


def expand_braces(word: str, limit: int) -> list[str]:
    """Bash brace expansion (``a{b,c}`` → ``ab ac``), bounded by ``limit`` results.

    Used to see what the shell would expand, and by list_files for ``*.{ts,tsx}`` globs.
    """
    results: list[str] = []
    pending = [word]
    while pending and len(results) + len(pending) <= limit:
        current = pending.pop()
        match = _BRACE.search(current)
        if match is None:
            results.append(current)
            continue
        for option in match.group(1).split(","):
            pending.append(current[: match.start()] + option + current[match.end():])
    return results + pending


def _runs(text: str) -> Iterator[str]:
    """Path-like runs of ``text``, with an attached short option stripped (``-o.env``)."""
    for run in _PATH_RUN.findall(text):
        yield run
        if run.startswith("-") and len(run) > 2:
            yield run.lstrip("-")[1:]
        if "," in run:
            yield from run.split(",")


def _candidates(command: str, words: list[str], settings: GuardSettings) -> Iterator[str]:
    """Every string the command could use as a path: path-like runs of the words and of
    the raw text (which also covers a command shlex cannot split), then whole words."""
    texts = words + [command]
    # a parameter expansion's default/alternative word is what the shell uses when the
    # variable is unset (or set): ``rm ${TARGET:-.env}`` removes .env
    texts += [m.group(1) for m in _PARAMETER_WORD.finditer(command)]
    if "$" in command:
        # the whole line as the shell reads it with every variable unset: the words of
        # expansions in place, plain ``$X`` / ``${X}`` empty (``.e${X:-n}v``, ``.e${U}nv``)
        unset = _PARAMETER_WORD.sub(lambda m: m.group(1), command)
        texts.append(re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "", unset))
    for match in _ANSI_C.finditer(command):
        try:
            texts.append(codecs.decode(match.group(1), "unicode_escape"))
        except (UnicodeDecodeError, ValueError):
            continue
    for text in texts:
        for run in _runs(text):
            yield from expand_braces(run, settings.brace_max_expansions)
    yield from words  # last: a path is reported as the run (".env"), not "of=.env"


def _glob_matches(root: str, pattern: str, limit: int) -> Iterator[str]:
    """What the shell would expand ``pattern`` to, run from the project directory."""
    if os.path.isabs(pattern) or pattern.startswith("~"):
        found = glob.iglob(os.path.expanduser(pattern))
    else:
        found = glob.iglob(pattern, root_dir=root)
    return itertools.islice(found, limit)


@dataclass
class _Scan:
    """One protected-path check: its inputs, and the candidates already judged."""

    root: str
    patterns: tuple[str, ...]
    settings: GuardSettings
    seen: set[str]

    def protected(self, candidate: str) -> bool:
        if candidate in self.seen or not candidate.strip():
            return False
        self.seen.add(candidate)
        return protected_match(self.root, candidate, self.patterns) is not None

    def mentioned(self, command: str, tokens: list[str]) -> str | None:
        words = [token for token in tokens if not is_operator(token)]
        for candidate in _candidates(command, words, self.settings):
            if self.protected(candidate):
                return os.path.normpath(candidate)
        # only a bare word is glob-expanded by the shell (not code or quoted prose)
        for word in words:
            if not _GLOB_CHARS.search(word) or re.search(r"\s", word):
                continue
            for pattern in expand_braces(word, self.settings.brace_max_expansions):
                for found in _glob_matches(self.root, pattern, self.settings.glob_max_matches):
                    if self.protected(found):
                        return found
        return None


# --- bulk operations ------------------------------------------------------------------


def _split_args(args: Iterable[str]) -> tuple[list[str], list[str]]:
    options, positional, after_dashdash = [], [], False
    for arg in args:
        if after_dashdash or not arg.startswith("-") or arg == "-":
            positional.append(arg)
        elif arg == "--":
            after_dashdash = True
        else:
            options.append(arg)
    return options, positional


def _has_flag(options: list[str], short: str, long: tuple[str, ...] = ()) -> bool:
    return any(
        (not opt.startswith("--") and any(c in opt[1:] for c in short)) or opt in long
        for opt in options
    )


def _bulk_targets(words: tuple[str, ...]) -> tuple[list[str], bool]:
    """Trees a command changes wholesale, and whether ``.git`` is spared (git clean)."""
    if not words:
        return [], False
    name, args = command_name(words[0]), list(words[1:])
    options, positional = _split_args(args)
    if name == "rm" and _has_flag(options, "rR", ("--recursive",)):
        return positional, False
    if name in ("chmod", "chown", "chgrp") and _has_flag(options, "R", ("--recursive",)):
        # the first operand is the mode/owner, unless given by --reference or as a
        # dash-mode (chmod -R -w dir), which parses as an option
        mode_elsewhere = any(
            opt.startswith("--reference") or re.fullmatch(r"-[rwxXst]+", opt) for opt in options
        )
        return positional if mode_elsewhere else positional[1:], False
    if name == "mv":
        return positional[:-1], False  # moving a tree removes it from where it was
    if name == "cp" and _has_flag(options, "rRa", ("--recursive", "--archive")):
        return positional[:-1], False  # its protected files would be written here
    if name == "rsync":
        deleting = any(opt.startswith("--delete") or opt == "--remove-source-files"
                       for opt in options)
        return positional if deleting else positional[:-1], False
    if name == "find":
        roots = list(itertools.takewhile(lambda a: not a.startswith(("-", "(", "!")), args))
        if any(arg in _FIND_ACTIONS for arg in args):
            return roots or ["."], False
    if name == "git" and "clean" in args:
        clean_options, pathspecs = _split_args(args[args.index("clean") + 1:])
        if not _has_flag(clean_options, "n", ("--dry-run",)):
            return pathspecs or ["."], True
    return [], False


def _protected_in_tree(
    target: str, root: str, compiled: CompiledPatterns, patterns: tuple[str, ...],
    settings: GuardSettings, spare_git: bool,
) -> str | None:
    """The first protected path inside the directory ``target`` (walk bounded)."""
    start = os.path.realpath(os.path.join(root, os.path.expanduser(target)))
    inside = os.path.relpath(start, root) if is_within(start, root) else start
    if not os.path.isdir(start) or set(inside.split(os.sep)) & set(settings.walk_skip_dirs):
        return None
    if is_within(root, start):
        start = root  # an ancestor of the project: what matters in it is the project

    def descend(entry: os.DirEntry[str]) -> bool:
        return not (spare_git and entry.name == ".git") and entry.name not in settings.walk_skip_dirs

    try:
        for entry in walk_tree(start, settings.walk_max_entries, descend):
            if spare_git and entry.name == ".git":
                continue
            if compiled.name_matches(entry.name) or (
                compiled.anchored and protected_match(root, entry.path, patterns)
            ):
                return os.path.relpath(entry.path, root) if is_within(start, root) else entry.path
    except TreeTooLarge:
        return f"{target} (too many files to check for protected paths)"
    return None


# --- public checks --------------------------------------------------------------------


def protected_write_target(
    command: str,
    project_dir: str | os.PathLike[str],
    patterns: Iterable[str] = DEFAULT_PROTECTED_PATTERNS,
    settings: GuardSettings = GuardSettings(),
) -> str | None:
    """The protected path ``command`` would touch (write, delete or read), or None.

    Run from ``project_dir``; relative paths are judged from there.
    """
    root = os.path.realpath(os.fspath(project_dir))
    return _protected(command, _Scan(root, tuple(patterns), settings, set()), 0)


def _protected(command: str, scan: _Scan, depth: int) -> str | None:
    tokens = lex(command)
    hit = scan.mentioned(command, tokens or [])
    if hit is not None or tokens is None:
        return hit
    compiled = compile_patterns(scan.patterns)
    for simple in split_simple(tokens):
        targets, spare_git = _bulk_targets(simple.words)
        for target in targets:
            expanded = (
                list(_glob_matches(scan.root, target, scan.settings.glob_max_matches))
                if _GLOB_CHARS.search(target)
                else [target]
            )
            for path in expanded:
                hit = _protected_in_tree(path, scan.root, compiled, scan.patterns,
                                         scan.settings, spare_git)
                if hit is not None:
                    return hit
        if depth < scan.settings.nesting_max_depth:
            for nested in nested_strings(simple):
                hit = _protected(nested, scan, depth + 1)
                if hit is not None:
                    return hit
    return None


def blocked_command(command: str, settings: GuardSettings = GuardSettings()) -> str | None:
    """Why ``command`` is refused outright as dangerous to the machine, or None."""
    if _FORK_BOMB.search(command):
        return "Blocked dangerous command: fork bomb"
    reason = _blocked(command, settings, 0)
    return None if reason is None else f"Blocked dangerous command: {reason}"


def _blocked(command: str, settings: GuardSettings, depth: int) -> str | None:
    simples = parse(command)
    if simples is None:
        # cannot tokenize: fall back to word matching on the raw text
        if re.search(r"(^|[\s;&|(`])(sudo|doas|mkfs(\.\w+)?|shutdown|reboot|killall)\b", command):
            return "a dangerous word in a command that cannot be parsed"
        return None
    for simple in simples:
        reason = _blocked_simple(simple)
        if reason is None and depth < settings.nesting_max_depth:
            for nested in nested_strings(simple):
                reason = reason or _blocked(nested, settings, depth + 1)
        if reason is not None:
            return reason
    return None


def _is_root_or_home(target: str) -> bool:
    """``/``, ``/*``, ``//``, ``~``, ``~/*``, ``$HOME``… (not a bare ``*``: that is the cwd)."""
    stripped = target.rstrip("*")
    if not stripped:
        return False
    if stripped.startswith("/") and os.path.normpath(stripped).strip("/") == "":
        return True  # normpath keeps POSIX's special leading "//"
    return stripped.rstrip("/") in ("~", "$HOME", "${HOME}")


def _blocked_simple(simple: SimpleCommand) -> str | None:
    privileged = [w for w in simple.wrappers if w in _PRIVILEGE]
    if privileged:
        return f"{privileged[0]} (privilege escalation is not allowed)"
    for op, target in simple.redirects:
        if ">" in op and target.startswith("/dev/") and not target.startswith(_SAFE_DEVICES):
            return f"writing to the device {target}"
    if not simple.words:
        return None
    name, args = command_name(simple.words[0]), list(simple.words[1:])
    options, positional = _split_args(args)
    if name in _PRIVILEGE:
        return f"{name} (privilege escalation is not allowed)"
    if name.startswith("mkfs") or name in ("mke2fs", "mkswap", "wipefs"):
        return f"{name} (formatting a file system)"
    if name in ("shutdown", "reboot", "halt", "poweroff") or (
        name == "systemctl" and set(positional) & {"poweroff", "reboot", "halt", "kexec"}
    ):
        return f"{name} (shutting down or rebooting the machine)"
    if name in ("killall", "killall5"):
        return f"{name} (killing processes by name)"
    if name == "rm" and _has_flag(options, "rR", ("--recursive",)):
        if any(_is_root_or_home(t) for t in positional) or "--no-preserve-root" in options:
            return "rm -r on / or the home directory"
    if name == "dd":
        for arg in args:
            if arg.startswith("of=/dev/") and not arg[3:].startswith(_SAFE_DEVICES):
                return f"dd to the device {arg[3:]}"
    if name in ("chmod", "chown", "chgrp") and any(_is_root_or_home(t) for t in positional[1:]):
        return f"{name} on / or the home directory"
    return None
