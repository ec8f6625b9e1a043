"""autogen-core's ``send_message`` round trip, paired with a plain Pykka ask (runs in its own venv).

Usage: ``python bench/_autogen_probe.py N TRIALS`` prints one JSON line. autogen-core is
never a project dependency, so this runs in ``bench/.autogen-venv`` (autogen-core and the
same Pykka version as the project). Both sides run here, in one process, at the same
moment: after a warm-up of each, ``TRIALS`` interleaved rounds of ``N`` round trips each
(``bench._paired``, standard library only). The Pykka asks block the event loop while
they run, which is harmless: autogen's runtime is idle between its own trials.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pykka
from autogen_core import (
    AgentId,
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    message_handler,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._paired import Outcome, compare, timed  # noqa: E402 - the path must be set first


@dataclass
class Ping:
    n: int


class Echo(RoutedAgent):
    def __init__(self) -> None:
        super().__init__("echo")

    @message_handler
    async def on_ping(self, message: Ping, ctx: MessageContext) -> Ping:
        return message


class PykkaEcho(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


async def main(n: int, trials: int) -> dict[str, Any]:
    runtime = SingleThreadedAgentRuntime()
    await Echo.register(runtime, "echo", lambda: Echo())
    runtime.start()
    target = AgentId("echo", "default")
    echo = PykkaEcho.start()
    loop = asyncio.get_running_loop()

    def pykka_side() -> Outcome:
        for i in range(n):
            echo.ask(i)
        return Outcome(n)

    async def autogen_sends() -> None:
        for i in range(n):
            await runtime.send_message(Ping(i), target)

    def autogen_side() -> Outcome:
        # timed from this thread: the loop runs the sends while we wait on them
        asyncio.run_coroutine_threadsafe(autogen_sends(), loop).result()
        return Outcome(n)

    def rounds() -> dict[str, list[Any]]:
        sides = {"pykka_plain": pykka_side, "autogen_send_message": autogen_side}
        for name in sides:  # warm-up
            sides[name]()
        out: dict[str, list[Any]] = {name: [] for name in sides}
        for k in range(trials):
            for name in (list(sides) if k % 2 == 0 else list(sides)[::-1]):
                out[name].append(timed(name, k, sides[name]))
        return out

    try:
        trials_by_side = await asyncio.to_thread(rounds)
    finally:
        echo.stop()
        await runtime.stop()
    paired = compare(trials_by_side, "pykka_plain", "autogen_send_message", kind="cost",
                     label="autogen-core send_message / plain Pykka ask")
    return {"paired": paired, "autogen_core": version("autogen-core"), "pykka": version("pykka"),
            "send_message_rtt_us": paired["b_median"]["wall_us_per_unit"],
            "pykka_ask_rtt_us": paired["a_median"]["wall_us_per_unit"]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))))
