"""autogen-core's SingleThreadedAgentRuntime.send_message round trip (runs in its own venv).

Usage: ``python bench/_autogen_probe.py N`` prints one JSON line. It imports nothing from
corvid-actors: autogen-core is never a project dependency.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass

from autogen_core import (
    AgentId,
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    message_handler,
)

REPEATS = 3


@dataclass
class Ping:
    n: int


class Echo(RoutedAgent):
    def __init__(self) -> None:
        super().__init__("echo")

    @message_handler
    async def on_ping(self, message: Ping, ctx: MessageContext) -> Ping:
        return message


async def main(n: int) -> dict[str, float]:
    runtime = SingleThreadedAgentRuntime()
    await Echo.register(runtime, "echo", lambda: Echo())
    runtime.start()
    target = AgentId("echo", "default")
    rtts = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for i in range(n):
            await runtime.send_message(Ping(i), target)
        rtts.append((time.perf_counter() - t0) / n * 1e6)
    await runtime.stop()
    from importlib.metadata import version

    return {"send_message_rtt_us": sorted(rtts)[len(rtts) // 2], "autogen_core": version("autogen-core")}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1])))))
