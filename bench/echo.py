"""``python -m bench.echo --port P``: an asyncio TCP echo server, the other end of the benchmark's hop
probe (:func:`hop_rtt_us`).

A round trip to it costs two loopback hops between Python processes and almost nothing else, which is the part
of every proxied request that no gateway code can remove: a bridged MRTR round crosses two more hops than the
same round done by a 2026 client directly (client -> gateway -> core instead of client -> core, and back), so
this machine's hop cost is printed beside the round's added time (docs/benchmarks.md "How it keeps the ratios honest").
"""

from __future__ import annotations

import argparse
import asyncio
import time

from gateway.ops.loops import CHOICES, install

PROBE = b"x" * 64


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(4096):
        writer.write(data)
    writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(_echo, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


async def hop_rtt_us(port: int, count: int = 2000) -> float:
    """Median round trip, in µs, of a 64-byte message to the echo server (one connection, one at a time)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    times = []
    try:
        for _ in range(count):
            began = time.perf_counter()
            writer.write(PROBE)
            got = 0
            while got < len(PROBE):
                chunk = await reader.read(4096)
                if not chunk:
                    raise ConnectionError("the echo server closed the probe connection")
                got += len(chunk)
            times.append(time.perf_counter() - began)
    finally:
        writer.close()
    times.sort()
    return round(times[len(times) // 2] * 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--loop", choices=CHOICES, default="asyncio")
    args = parser.parse_args()
    install(args.loop)
    asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
