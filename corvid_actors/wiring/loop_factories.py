"""The loop table: what a loop factory is given (:class:`LoopSpec`) and the default
factories by loop name (``conversation``, ``direct``, ``sdk``).

A loop takes its config section as its settings (``[direct_loop]`` is the direct loop's
:class:`~corvid_actors.loop.settings.DirectLoopSettings`): nothing is copied here. A host
adds or replaces loops through ``Runtime(loops=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corvid_actors.config import Config
from corvid_actors.core.vocabulary import TASK_AGENT, PermissionCheck
from corvid_actors.loop.conversation import ConversationLoop
from corvid_actors.loop.direct import DirectLoop
from corvid_actors.loop.effects import Loop
from corvid_actors.loop.rules import rules_for
from corvid_actors.loop.sdk import SdkLoop
from corvid_actors.tools.base import ToolRegistry


@dataclass(frozen=True)
class LoopSpec:
    """Everything a loop factory may use to build a loop for one incarnation."""

    model: str
    system_prompt: str
    tools: ToolRegistry
    permission_check: PermissionCheck
    context_window: int
    council_role: str | None
    config: Config
    provider_name: str
    #: the OpenAgent rules' inputs (corvid_actors.loop.rules.rules_for reads them)
    agent_name: str = ""
    permission_mode: str = "default"
    #: names of the session's COMMAND tools (observation tails, command approval policy)
    command_tools: tuple[str, ...] = ()
    #: the plan stored for this session (sessions.plan), resumed by a new incarnation
    initial_plan: tuple[dict[str, Any], ...] = ()
    #: made by the approval / history policy factories (None: no policy)
    approval_policy: Any = None
    history_policy: Any = None
    #: whether this incarnation's commands run in the OS sandbox (auto-approval needs it)
    sandboxed: bool = False
    project_dir: Path | None = None
    #: ``task`` or ``chat`` (corvid_actors.core.vocabulary.AGENT_KINDS): only task agents are nudged
    agent_kind: str = TASK_AGENT


LoopFactory = Callable[[LoopSpec], Loop]
#: ``(spec) -> ApprovalPolicy`` (corvid_actors.tools.command_policy); spec has no policies yet
ApprovalPolicyFactory = Callable[[LoopSpec], Any]
#: ``(spec) -> HistoryPolicy | None`` (corvid_actors.loop.memory_policy)
HistoryPolicyFactory = Callable[[LoopSpec], Any]

def conversation_loop(spec: LoopSpec) -> Loop:
    return ConversationLoop(model=spec.model, system_prompt=spec.system_prompt)


def direct_loop(spec: LoopSpec) -> Loop:
    """The direct (Ollama) loop, with the ``[direct_loop]`` section as its settings."""
    return DirectLoop(
        model=spec.model, system_prompt=spec.system_prompt, tools=spec.tools.specs(),
        permission_check=spec.permission_check, context_window=spec.context_window,
        settings=spec.config.direct_loop, council_role=spec.council_role, rules=rules_for(spec),
        kind=spec.agent_kind,
    )


def sdk_loop(spec: LoopSpec) -> Loop:
    """The SDK (Anthropic) loop, with the ``[sdk_loop]`` section as its settings."""
    return SdkLoop(
        model=spec.model, system_prompt=spec.system_prompt, tools=spec.tools.specs(),
        permission_check=spec.permission_check, context_window=spec.context_window,
        settings=spec.config.sdk_loop, rules=rules_for(spec),
    )


DEFAULT_LOOPS: dict[str, LoopFactory] = {
    "conversation": conversation_loop,
    "direct": direct_loop,
    "sdk": sdk_loop,
}
