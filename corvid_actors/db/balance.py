"""How many sessions a daemon hands over in a rebalance (issue 36 item 7): a plain function.

After a daemon was killed and restarted, ownership stayed 27/33 on two daemons and the
restarted one got only new sessions: nothing moves a session that runs fine. A rebalance
(``admin rebalance``, or ``[cluster] rebalance_on_join``) has each daemon above the bound
offer idle sessions to the least-loaded ones; :func:`rebalance_moves` says how many to which.
"""

from __future__ import annotations

from collections.abc import Mapping


def rebalance_moves(load: Mapping[str, int], me: str, tolerance: int, movable: int) -> dict[str, int]:
    """How many of ``me``'s sessions to offer to each other daemon, by id (none listed: none).

    ``load``: the live daemons' session counts (``me`` among them; a hand-over not yet
    taken counts for its target). One session at a time goes from ``me`` to the least
    loaded other daemon (ties: the smallest id) while ``me`` holds more than ``tolerance``
    more than it, and ``movable`` (idle sessions here) allows. 10 and 0 with tolerance 1:
    5 move; 33 and 27: 3 move; 10, 0 and 0: 3 to each.
    """
    if tolerance < 1:
        raise ValueError(f"a rebalance's tolerance is at least 1 (got {tolerance}): with 0, two daemons "
                         "would pass a session back and forth")
    counts = dict(load)
    if me not in counts or len(counts) < 2:
        return {}
    moves: dict[str, int] = {}
    for _ in range(max(movable, 0)):
        target = min((d for d in counts if d != me), key=lambda d: (counts[d], d))
        if counts[me] - counts[target] <= tolerance:
            break
        counts[me] -= 1
        counts[target] += 1
        moves[target] = moves.get(target, 0) + 1
    return moves
