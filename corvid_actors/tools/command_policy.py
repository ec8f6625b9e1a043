"""Command approval policy (OpenAgent seed): which shell commands run without a human.

For a command tool (``run_command``) whose permission check says ASK, in this order:

1. a command approved "for this session" before — same *signature*, i.e. the same
   words once the shell's quoting and spacing are normalised — runs;
2. in the modes listed in ``auto_approve_modes`` (default ``auto-edit``, where
   read-only tools already run) and only while commands run in the OS sandbox
   (``tools.sandbox``), a *simple* allowlisted command runs: its leading words
   match an allowlist pattern (``ls``, ``git status``, …), it has no shell
   metacharacters (no pipes, redirections, substitutions, globs, ``~``, separators), no
   argument leaves the project (absolute paths, ``..``, option values such as
   ``-f/etc/x`` or ``--file=/etc/x``, symlinks in the project whose target is outside),
   and none of the program's dangerous flags is present as GNU parsers read them
   (``find -exec``/``-delete``, ``tail -f``, ``grep -r`` also as ``-rA1`` or
   ``--recurs``, ``git diff --output``, …); a command that does not parse asks;
3. anything else goes to the ApprovalBroker as an approval of kind ``command``.

A DENY from the permission check (protected paths, plan mode, dangerous commands) is
never upgraded, and ALLOW (``full-auto``) stays ALLOW. The broker's own "allow for the
session" grant is by tool name, which for a shell would approve *every* command — hence
the ``command`` kind, which the broker does not grant wholesale, and the signature kept
here instead.

The rules are pure functions; :class:`CommandApprovalPolicy` is the small stateful
object (one per session incarnation) the loops call through the
:class:`~corvid_actors.core.vocabulary.ApprovalPolicy` protocol, which a host may replace
(``Runtime(approval_policy_factory=…)``); :func:`default_approval_policy` builds it from
the configuration.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from corvid_actors.core.vocabulary import COMMAND_APPROVAL, Permission, PermissionDecision, Review
from corvid_actors.tools.paths import is_within

DEFAULT_ALLOWLIST: tuple[str, ...] = (
    "ls", "pwd", "cat", "head", "tail", "wc", "grep", "find", "tree", "file", "stat", "du",
    "echo", "which", "diff", "git status", "git log", "git diff", "git show", "git ls-files",
    "git blame", "git rev-parse",
)

#: per program: flags that write files, run other programs, never end, or read file
#: contents recursively (a recursive read reaches protected files no argument names,
#: so it needs a human; ``rg`` recurses by default and is left off the allowlist)
DEFAULT_DANGEROUS_FLAGS: Mapping[str, tuple[str, ...]] = {
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0",
             "-fprintf", "-fls"),
    "grep": ("-r", "-R", "--recursive", "--dereference-recursive", "-d", "--directories"),
    "diff": ("-r", "--recursive"),
    "tail": ("-f", "-F", "--follow", "--retry"),
    "tree": ("-o",),
    "file": ("-C", "--compile"),
    "git": ("--output", "--ext-diff"),
}

#: characters that make a command line more than one simple command
SHELL_METACHARACTERS = frozenset(";&|<>()$`\\{}*?[]!#\n\r")
#: a ``~`` the shell expands to a home directory (word start, or after ``=`` / ``:``)
_TILDE = re.compile(r"(?:^|[\s=:])~")


@dataclass(frozen=True)
class CommandPolicySettings:
    """The policy's configuration (``[command_policy]``)."""

    enabled: bool = True
    allowlist: tuple[str, ...] = DEFAULT_ALLOWLIST
    #: permission modes in which allowlisted commands skip the human
    auto_approve_modes: tuple[str, ...] = ("auto-edit",)
    dangerous_flags: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: dict(DEFAULT_DANGEROUS_FLAGS))


# --- pure rules --------------------------------------------------------------------------


def split_command(command: str) -> list[str] | None:
    """The command's words (shell quoting removed); None when it does not parse."""
    try:
        return shlex.split(command, comments=False, posix=True)
    except ValueError:
        return None


def command_signature(command: str) -> str:
    """The identity of a command for session approvals: its words, normalised (spacing
    and quoting style do not matter; word boundaries do)."""
    words = split_command(command)
    return shlex.join(words) if words else command.strip()


def _flag_hit(word: str, flags: Iterable[str]) -> str | None:
    """The dangerous flag ``word`` spells, as a GNU parser would read it.

    ``--opt`` and ``--opt=value`` match their flag and every abbreviation of it (GNU
    getopt accepts any unambiguous prefix: ``--recurs``, ``--direc=recurse``); a short
    bundle matches when the flag's letter appears anywhere in it (``-rA1``, ``-Nr``):
    which letters take a value differs per program, so any letter counts.
    """
    if word.startswith("--"):
        name = word.split("=", 1)[0]
        for flag in flags:
            if flag.startswith("--") and len(name) > 2 and flag.startswith(name):
                return flag
        return None
    for flag in flags:
        if word == flag or (flag.startswith("-") and len(flag) > 2 and word.startswith(flag + "=")):
            return flag
        short = len(flag) == 2 and flag.startswith("-") and flag[1] != "-"
        if short and word.startswith("-") and len(word) > 2 and flag[1] in word[1:]:
            return flag
    return None


def _option_values(word: str) -> list[str]:
    """What an option word may carry as a value: after ``=`` for a long option; for a
    short bundle every suffix (``-f/etc/shadow`` is ``-f`` with ``/etc/shadow``)."""
    if word.startswith("--"):
        return [word.split("=", 1)[1]] if "=" in word else []
    return [word[i:] for i in range(2, len(word))] + (
        [word.split("=", 1)[1]] if "=" in word else [])


def _leaves_project(value: str, project_dir: str | None) -> bool:
    """Whether a path-like ``value`` names something outside the project: absolute,
    ``..``, or — symlinks resolved — a path inside whose target lies outside."""
    parts = value.replace("\\", "/").split("/")
    if value.startswith("/") or ".." in parts:
        return True
    if project_dir is None or not value:
        return False
    root = os.path.realpath(project_dir)
    return not is_within(os.path.realpath(os.path.join(root, value)), root)


def auto_approval_refusal(command: str, settings: CommandPolicySettings,
                          project_dir: str | os.PathLike[str] | None = None) -> str | None:
    """Why ``command`` is not auto-approvable (None: it is). Pure apart from resolving
    symlinks under ``project_dir``; for tests and logs. Anything it cannot read is refused."""
    if not command.strip():
        return "empty command"
    bad = sorted(set(command) & SHELL_METACHARACTERS) + (["~"] if _TILDE.search(command) else [])
    if bad:
        return f"shell metacharacters: {' '.join(repr(c) for c in bad)}"
    words = split_command(command)
    if not words:
        return "does not parse"
    pattern = next((p for p in settings.allowlist if words[: len(p.split())] == p.split()), None)
    if pattern is None:
        return f"{words[0]!r} is not on the allowlist"
    root = os.fspath(project_dir) if project_dir is not None else None
    flags = settings.dangerous_flags.get(words[0], ())
    for word in words[1:]:
        hit = _flag_hit(word, flags)
        if hit is not None:
            return f"dangerous flag {hit} for {words[0]}"
        values = _option_values(word) if word.startswith("-") else [word]
        if word.startswith("-") and any(v.startswith("/") or ".." in v.split("/") for v in values):
            return f"argument {word!r} reaches outside the project"
        # option values are judged as written (any suffix may be one); a plain word is
        # also resolved, so a symlink in the project cannot lead out unseen
        if not word.startswith("-") and _leaves_project(word, root):
            return f"argument {word!r} reaches outside the project"
        if word.startswith("--") and "=" in word and _leaves_project(values[0], root):
            return f"argument {word!r} reaches outside the project"
    return None


def is_auto_approvable(command: str, settings: CommandPolicySettings,
                       project_dir: str | os.PathLike[str] | None = None) -> bool:
    return auto_approval_refusal(command, settings, project_dir) is None


# --- the collaborator --------------------------------------------------------------------


class CommandApprovalPolicy:
    """The default policy (see the module docstring); one per session incarnation."""

    def __init__(self, settings: CommandPolicySettings = CommandPolicySettings(),  # noqa: B008 - frozen
                 *, command_tools: Iterable[str] = ("run_command",), mode: str = "default",
                 command_argument: str = "command", sandboxed: bool = False,
                 project_dir: str | os.PathLike[str] | None = None) -> None:
        self.settings = settings
        #: auto-approval happens only when commands run in the OS sandbox: the policy
        #: reads words, the sandbox holds whatever they compute at run time
        self.sandboxed = sandboxed
        self.project_dir = project_dir
        self.command_tools = frozenset(command_tools)
        self.mode = mode
        self.command_argument = command_argument
        self._approved: set[str] = set()

    @property
    def approved_signatures(self) -> frozenset[str]:
        """Commands a human allowed for this session."""
        return frozenset(self._approved)

    def _command(self, tool_name: str, arguments: Mapping[str, Any]) -> str | None:
        if tool_name not in self.command_tools:
            return None
        value = arguments.get(self.command_argument)
        return value if isinstance(value, str) else None

    def review(self, tool_name: str, arguments: Mapping[str, Any],
               decision: PermissionDecision) -> Review:
        if tool_name not in self.command_tools or not self.settings.enabled:
            return Review(decision)
        command = self._command(tool_name, arguments)
        if decision.permission is not Permission.ASK or command is None:
            return Review(decision, COMMAND_APPROVAL)
        if command_signature(command) in self._approved:
            return Review(PermissionDecision(Permission.ALLOW))
        if (self.sandboxed and self.mode in self.settings.auto_approve_modes
                and is_auto_approvable(command, self.settings, self.project_dir)):
            return Review(PermissionDecision(Permission.ALLOW))
        return Review(decision, COMMAND_APPROVAL)

    def remember(self, tool_name: str, arguments: Mapping[str, Any]) -> None:
        command = self._command(tool_name, arguments)
        if command is not None and self.settings.enabled:
            self._approved.add(command_signature(command))


def default_approval_policy(spec: Any) -> CommandApprovalPolicy:
    """The configured command approval policy for one incarnation, from its
    :class:`~corvid_actors.wiring.loop_factories.LoopSpec` (the Runtime's default ``approval_policy_factory``)."""
    c = spec.config.command_policy
    settings = CommandPolicySettings(enabled=c.enabled, allowlist=c.allowlist,
                                     auto_approve_modes=c.auto_approve_modes)
    return CommandApprovalPolicy(settings, command_tools=spec.command_tools, mode=spec.permission_mode,
                                 sandboxed=getattr(spec, "sandboxed", False),
                                 project_dir=getattr(spec, "project_dir", None))
