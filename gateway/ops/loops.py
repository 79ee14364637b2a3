"""Process tuning for the servers: the event loop (``--loop auto|asyncio|uvloop``) and the garbage collector
(``--gc-gen0``).

uvloop is optional (the ``fast`` extra); ``auto`` uses it when installed. The default is plain asyncio, the
loop the test suite runs on: on the reference 2-core machine an interleaved A/B measured uvloop at 4% less gateway
CPU per request and no change in median latency (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import gc

CHOICES = ("auto", "asyncio", "uvloop")


def install(choice: str) -> str:
    """Install the chosen event-loop policy for this process; returns the loop actually used."""
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SystemExit("--loop uvloop: uvloop is not installed (pip install '.[fast]')") from None
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def tune_gc(gen0: int) -> None:
    """Freeze what start-up made and collect the young generation less often (``gen0 <= 0``: Python's defaults).

    Why, from the benchmark (docs/benchmarks.md "Where the time goes"): the start-up heap (mcp-types' pydantic
    validators and schemas, aiohttp) is never garbage, yet every full collection walked all of it (about 50 ms a pass
    here); frozen, it is skipped. And each request allocates a few hundred container objects, so at Python's default
    threshold (700) a young collection ran every request or two; at 10,000 interleaved A/Bs measured 5-8% less gateway
    CPU per translated and per bridged request at concurrency 32 (no measurable change at concurrency 1). Cycles are
    still collected, only in larger batches; what they hold waits a little longer (kilobytes, not the idle-session
    budget)."""
    if gen0 <= 0:
        return
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0, gen1, gen2)
