"""How the shell guard reads a command line: quote-aware tokens, simple commands with
their redirections, wrappers (env, nohup, xargs, sudo…) stripped, and the nested command
strings (``sh -c``, ``eval``, one-liners) to check again. Parsing only: the checks are in
:mod:`.shell_guard`."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

#: characters that end a word and form operators (``;``, ``&&``, ``|``, redirections…)
PUNCTUATION = "();<>|&`\n"
#: command names that run their ``-c`` argument as a command line
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "fish", "su", "runuser"})
#: wrapper → its options that take a separate value; the wrapped command follows
WRAPPERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "nohup": frozenset(),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p", "--class", "--classdata"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "setsid": frozenset(),
    "unbuffer": frozenset(),
    "chronic": frozenset(),
    "busybox": frozenset(),
    "xargs": frozenset({"-I", "-n", "-P", "-d", "-L", "-s", "-E", "-a", "--max-args",
                        "--max-procs", "--delimiter", "--arg-file", "--max-lines"}),
    "sudo": frozenset({"-u", "-g", "-C", "-h", "-p", "-r", "-t", "-U", "--user", "--group"}),
    "doas": frozenset({"-u", "-C"}),
}

@dataclass(frozen=True)
class SimpleCommand:
    """One simple command: its words (wrappers stripped) and its redirections."""

    words: tuple[str, ...]
    redirects: tuple[tuple[str, str], ...]
    wrappers: tuple[str, ...]


def lex(command: str) -> list[str] | None:
    """Shell-like tokens, quote-aware, operators as their own tokens (None: unbalanced)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=PUNCTUATION)
    lexer.whitespace = " \t\r"  # a newline separates commands: it is punctuation here
    lexer.commenters = ""  # keep everything: a "comment" hiding a path is still checked
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return None


def is_operator(token: str) -> bool:
    """Is ``token`` an operator or redirection (all punctuation)?"""
    return bool(token) and all(char in PUNCTUATION for char in token)


def split_simple(tokens: list[str]) -> list[SimpleCommand]:
    """Split on ; && || | & newline ( ) ` and collect redirections."""
    commands: list[SimpleCommand] = []
    words: list[str] = []
    redirects: list[tuple[str, str]] = []
    pending: str | None = None
    for token in tokens + [";"]:
        if is_operator(token):
            if "<" in token or ">" in token:
                pending = token
                continue
            if words or redirects:
                commands.append(unwrap(words, redirects))
            words, redirects, pending = [], [], None
        elif pending is not None:
            redirects.append((pending, token))
            pending = None
        else:
            words.append(token)
    return commands


def command_name(word: str) -> str:
    """The command a word names (``/usr/bin/rm`` → ``rm``)."""
    return os.path.basename(word)


def unwrap(words: list[str], redirects: list[tuple[str, str]]) -> SimpleCommand:
    """Strip assignments and wrappers (env, nohup, xargs, sudo…) down to the real command."""
    rest = list(words)
    wrappers: list[str] = []
    while rest:
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", rest[0], re.DOTALL):
            rest.pop(0)
            continue
        name = command_name(rest[0])
        if name not in WRAPPERS:
            break
        wrappers.append(name)
        takes_value = WRAPPERS[name]
        rest.pop(0)
        while rest and rest[0].startswith("-") and rest[0] != "-":
            option = rest.pop(0)
            if option == "--":
                break
            if name == "env" and option in ("-S", "--split-string") and rest:
                rest = [t for t in lex(rest.pop(0)) or [] if not is_operator(t)] + rest
            elif option in takes_value and rest:
                rest.pop(0)
        if name == "timeout" and rest:
            rest.pop(0)  # the duration
    return SimpleCommand(tuple(rest), tuple(redirects), tuple(wrappers))


def parse(command: str) -> list[SimpleCommand] | None:
    """The command line's simple commands (None: unbalanced quotes)."""
    tokens = lex(command)
    return None if tokens is None else split_simple(tokens)


def nested_strings(simple: SimpleCommand) -> list[str]:
    """Words that are themselves command lines: ``sh -c STR``, ``eval ARGS``, any word
    with spaces or operators (interpreter one-liners, ``"$(…)"``)."""
    words = simple.words
    nested = [word for word in words if re.search(r"[\s;|&<>()`]", word)]
    if words and command_name(words[0]) == "eval":
        nested.append(" ".join(words[1:]))
    if words and command_name(words[0]) in SHELLS:
        positional = [w for w in words[1:] if not w.startswith("-")]
        has_c = any(re.fullmatch(r"-[A-Za-z]*c[A-Za-z]*", w) for w in words[1:])
        if has_c and positional:
            nested.append(positional[0])
    return nested
