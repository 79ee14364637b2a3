"""The tests' loopback TCP proxies share one piece: copying one direction of a connection until either end goes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
               seen: Callable[[bytes], None] | None = None) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends or either side breaks, then close ``dst``; ``seen`` reads each
    chunk on the way (a proxy that watches what passes)."""
    try:
        while data := await src.read(65536):
            if seen is not None:
                seen(data)
            dst.write(data)
            await dst.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        dst.close()
