"""``python -m bench.reverse [--duration S] [--warmup S] [--slice S] [--concurrency 1] [--legacy-python PATH]
[--loop asyncio|uvloop] [--check]``.

What the reverse bridge costs (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge), on one
sampling tool of a 2025-11-25-only server written with the official ``mcp`` 1.x SDK
(tests/gateway/http/legacy_sdk1_server.py, ``ask_model``), both scenarios interleaved in short slices as ``python -m
bench`` does:

- ``legacy_direct``: a 2025 client (one session) calls it on the legacy server itself, answering the server's
  live ``sampling/createMessage`` on the call's SSE stream;
- ``reverse_bridged``: a 2026-07-28 client calls it through the gateway, which turns that live request into an
  ``input_required`` round; the client answers it and retries (two requests, one pooled legacy session);
- ``reverse_floor``: the same 2026 client through bench.reverse_floor, the same mapping in bare aiohttp (the same
  HTTP exchanges, and no validation, sealing, pool or usage records): the floor for a Python reverse bridge on this
  machine, so the report splits the bridged ratio into what any such bridge adds and what the gateway adds to it.

Target (bench/targets.py ``reverse_targets``): the bridged median at most 1.3 times the direct one at c=1. The
1.x SDK lives in a venv of its own (``--legacy-python``; by default the one the reverse e2e tests build,
tests/gateway/http/test_doors_sdk1.py).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import sys
from pathlib import Path
from typing import Any

import aiohttp

from bench.__main__ import Op, Stats, interleaved
from bench.clients import LegacyClient, ModernClient
from bench.procs import Child, scratch_usage_db
from bench.targets import reverse_targets

SERVER = Path(__file__).resolve().parent.parent / "tests" / "gateway" / "http" / "legacy_sdk1_server.py"
ARGUMENTS = {"topic": "bench"}
# The judged ratio, then its two factors (reported): what a bare bridge adds, and what the gateway adds to that.
RATIOS = (("reverse_bridged", "legacy_direct"), ("reverse_floor", "legacy_direct"),
          ("reverse_bridged", "reverse_floor"))


def legacy_python(given: str | None) -> str:
    found = [given] if given else sorted(glob.glob("/tmp/mcp-legacy-gateway-sdk1-*/bin/python"))
    if not found:
        sys.exit("no venv with the official mcp 1.x SDK: pass --legacy-python, or run "
                 "tests/gateway/http/test_reverse_e2e.py once (it builds one)")
    return found[-1]


async def run(args: argparse.Namespace) -> list[Stats]:
    started: list[Child] = []
    try:
        legacy = Child("legacy", ["-I", str(SERVER), "{port}"], python=legacy_python(args.legacy_python))
        started.append(legacy)
        gateway = Child("gateway", ["-m", "gateway", "serve", "--port", "{port}", "--upstream", legacy.url,
                                    "--upstream-era", "2025-11-25", "--no-access-log", "--loop", args.loop,
                                    "--usage-db", scratch_usage_db()])
        started.append(gateway)
        floor = Child("floor", ["-m", "bench.reverse_floor", "--port", "{port}", "--upstream", legacy.url,
                                "--loop", args.loop])
        started.append(floor)
        front = {"legacy_direct": legacy, "reverse_bridged": gateway, "reverse_floor": floor}
        results: list[Stats] = []
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            for conc in args.concurrency:
                ops = {"legacy_direct": [await _direct(http, legacy.url) for _ in range(conc)],
                       "reverse_bridged": [_bridged(http, gateway.url) for _ in range(conc)],
                       "reverse_floor": [_bridged(http, floor.url) for _ in range(conc)]}
                results += await interleaved(ops, conc, args, front)
        return results
    finally:
        for child in reversed(started):
            child.stop()


async def _direct(http: aiohttp.ClientSession, url: str) -> Op:
    client = LegacyClient(http, url)
    await client.start()

    async def op() -> None:
        if not await client.call("ask_model", ARGUMENTS):
            raise RuntimeError("ask_model on the legacy server failed")
    return op


def _bridged(http: aiohttp.ClientSession, url: str) -> Op:
    client = ModernClient(http, url)
    return lambda: client.ask("ask_model", ARGUMENTS)


def ratios_of(results: list[Stats]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for conc in sorted({r.concurrency for r in results}):
        p50 = {r.scenario: r.p50_ms for r in results if r.concurrency == conc}
        out[f"c{conc}"] = {f"{a}/{b}": round(p50[a] / p50[b], 3) for a, b in RATIOS}
    return out


def report(results: list[Stats]) -> bool:
    """Print the table, the ratios and the target's verdict; True when it is met (or not measured)."""
    print(f"{'scenario':18} {'c':>3} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8} {'front CPU us/req':>17}")
    for r in results:
        print(f"{r.scenario:18} {r.concurrency:>3} {r.requests:>9} {r.p50_ms:>8} {r.p99_ms:>8} "
              f"{r.front_cpu_us_per_request!s:>17}")
    ratios = ratios_of(results)
    for conc, values in ratios.items():
        print(f"{conc}: median latency " + "; ".join(f"{k.replace('/', ' / ')} {v}" for k, v in values.items()))
    met = True
    for target in reverse_targets(ratios):
        value = target.read(ratios)
        ok = None if value is None else target.met(value)
        met &= ok is not False or not target.judged
        verdict = "not measured" if ok is None else "met" if ok else "MISSED" if target.judged else "reported (over)"
        print(f"target {target.name} <= {target.limit}: {value} ({verdict})")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.reverse", description=__doc__)
    parser.add_argument("--duration", type=float, default=4.0, help="measured seconds per scenario")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds per scenario not counted")
    parser.add_argument("--slice", type=float, default=0.5, help="seconds per scenario per alternating round")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1])
    parser.add_argument("--legacy-python", default=None, help="the interpreter of a venv holding mcp 1.x")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="event loop of the gateway and the floor (the 1.x SDK server keeps its own)")
    parser.add_argument("--check", action="store_true", help="exit with status 1 when the target is missed")
    args = parser.parse_args()
    met = report(asyncio.run(run(args)))
    sys.exit(1 if args.check and not met else 0)


if __name__ == "__main__":
    main()
