"""Two plain tools: ``echo`` (the benchmarks' trivial call) and ``slow_count`` (progress and log streaming)."""

from __future__ import annotations

import asyncio
from typing import Any

from modern_server.errors import McpError
from modern_server.framework import Context, Tool, arguments, text_result


async def echo(ctx: Context) -> dict[str, Any]:
    text = arguments(ctx).get("text", "")
    if not isinstance(text, str):
        raise McpError.invalid_params("text must be a string")
    return text_result(text)


async def slow_count(ctx: Context) -> dict[str, Any]:
    n = arguments(ctx).get("n", 3)
    delay = arguments(ctx).get("delay", 0.0)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 1000:
        raise McpError.invalid_params("n must be an integer from 0 to 1000")
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= 5:
        raise McpError.invalid_params("delay must be a number of seconds from 0 to 5")
    for i in range(1, n + 1):
        await ctx.log("info", {"step": i, "of": n}, logger="slow_count")
        await ctx.progress(i, n, f"step {i} of {n}")
        if delay:
            await asyncio.sleep(delay)
    return text_result(f"counted to {n}", {"count": n})


TOOLS = (
    Tool("echo", "Echo the given text back.", {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
    }, echo, title="Echo", annotations={"readOnlyHint": True}),
    Tool("slow_count", "Count to n, streaming progress (with a progressToken) and log messages (with a logLevel).", {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 1000},
                       "delay": {"type": "number", "minimum": 0, "maximum": 5}},
    }, slow_count, title="Slow count", annotations={"readOnlyHint": True}),
)
