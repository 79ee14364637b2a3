"""Process tuning for the servers: the event loop (``--loop auto|asyncio|uvloop``) and the garbage collector
(``--gc-gen0``).

uvloop is optional (the ``fast`` extra); ``auto`` uses it when installed. The default is plain asyncio, the
loop the test suite runs on; uvloop saves a little CPU per request and no latency (docs/benchmarks.md has the
current A/B).
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

    Why (docs/benchmarks.md "Where the time goes" has the figures): the start-up heap (mcp-types' pydantic
    validators and schemas, aiohttp) is never garbage, yet every full collection walks all of it; frozen, it is
    skipped. And each request allocates a few hundred container objects, so at Python's default threshold (700) a
    young collection runs every request or two; a larger threshold saves CPU under concurrency. Cycles are still
    collected, only in larger batches; what they hold waits a little longer (kilobytes, not the idle-session
    budget)."""
    if gen0 <= 0:
        return
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0, gen1, gen2)
