"""How the Ollama stub streams one scripted :class:`Turn`: NDJSON chunks (thinking,
text pieces, tool calls, the final chunk), with the turn's delays and its fault — a
connection dropped after some chunks, or an error line in place of the rest.
"""

from __future__ import annotations

from corvid_actors.core.jsontypes import JsonObject
from corvid_actors.testing._ollama_http import StubHandler
from corvid_actors.testing._ollama_wire import (
    Turn,
    chunk,
    final_chunk,
    split_chunks,
    tool_calls_message,
)


def stream_turn(handler: StubHandler, model: str, turn: Turn, body: JsonObject) -> bool:
    """Stream ``turn`` as ``model``'s reply to ``body``; True if it ran to its final chunk
    (False after an injected fault). Raises ``ClientGone`` if the client hangs up."""
    interrupted = turn.http_fault or turn.fault == "drop_mid_stream"
    if turn.thinking:
        handler.wait(turn.delay_s)
        handler.send_line(
            chunk(model, {"role": "assistant", "content": "", "thinking": turn.thinking})
        )
    for index, piece in enumerate(split_chunks(turn.text, turn.chunks)):
        if interrupted and index >= turn.after_chunks:
            break
        handler.wait(turn.delay_s)
        handler.send_line(chunk(model, {"role": "assistant", "content": piece}))
    if turn.fault == "drop_mid_stream":
        handler.drop(reset=turn.reset)
        return False
    if turn.http_fault:
        handler.send_line({"error": turn.error_text(model)})
        handler.end_stream()
        return False
    if turn.tool_calls:
        handler.wait(turn.delay_s)
        handler.send_line(chunk(model, tool_calls_message(turn)))
    handler.wait(turn.delay_s)
    handler.send_line(final_chunk(model, turn, body))
    handler.end_stream()
    return True
