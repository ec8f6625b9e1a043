"""Glob patterns matched against paths, one component at a time (pure functions).

list_files walks the project itself (never following a symlink, bounded and stoppable:
:meth:`corvid_actors.tools.safe_open.ProjectTree.walk`) and asks a :class:`GlobPattern`
two questions about each path: does it match, and may anything below it match (so the
walk enters only directories that can lead somewhere). The language is Python's
``glob(recursive=True)``: ``*``, ``?`` and ``[...]`` inside one component, ``**`` for any
number of directories; a name starting with ``.`` is matched only by a component that
starts with ``.`` (no dotfiles unless the pattern names them, like the original's glob).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass


def _component_matches(component: str, name: str) -> bool:
    if name.startswith(".") and not component.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, component)


@dataclass(frozen=True)
class GlobPattern:
    """A glob split into components (``/`` separated; empty and ``.`` components dropped)."""

    components: tuple[str, ...]

    @classmethod
    def parse(cls, pattern: str) -> GlobPattern:
        parts = pattern.replace("\\", "/").split("/")
        return cls(tuple(part for part in parts if part not in ("", ".")))

    def _closure(self, states: set[int]) -> set[int]:
        # ``**`` may match no directory at all: being before it is being after it too
        done = set(states)
        for index in sorted(states):
            while index < len(self.components) and self.components[index] == "**":
                index += 1
                done.add(index)
        return done

    def _states(self, relative: str) -> set[int]:
        """The pattern positions reachable after matching ``relative`` (an NFA's states)."""
        states = self._closure({0})
        for name in relative.split("/") if relative not in ("", ".") else ():
            following: set[int] = set()
            for index in states:
                if index == len(self.components):
                    continue
                component = self.components[index]
                if component == "**":
                    if not name.startswith("."):
                        following.add(index)
                elif _component_matches(component, name):
                    following.add(index + 1)
            states = self._closure(following)
            if not states:
                break
        return states

    def matches(self, relative: str) -> bool:
        """Whether the path ``relative`` (``/``-separated, from the project) matches."""
        return len(self.components) in self._states(relative)

    def may_descend(self, relative: str) -> bool:
        """Whether a path below the directory ``relative`` could match."""
        return any(index < len(self.components) for index in self._states(relative))
