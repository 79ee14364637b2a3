"""``python -m bench.ab --tree A=DIR --tree B=DIR [--scenario translated,bridged] [--concurrency 1,32]
[--duration 8] [--slice 0.5] [--redis URL]``: the same scenarios through two gateways built from two checkouts,
side by side.

One core serves both gateways, and their slices alternate (order reversed every round) as in the main benchmark,
so the machine's drift (tens of percent here) slows both alike and the ratios B/A stay meaningful. Each gateway's
CPU per request is read from ``/proc`` around its own slices. Make the checkouts with ``git worktree add DIR REV``.
``--redis URL`` runs both gateways on that Redis store, each under a key prefix of its own that is deleted at the
end (a change to the Redis path is measured the same way).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
from typing import Any

import aiohttp

from bench.__main__ import Stats, interleaved, makers
from bench.procs import Child, scratch_usage_db
from bench.redis_side import delete_keys, store_args


async def run(args: argparse.Namespace) -> list[Stats]:
    core = Child("core", ["-m", "modern_server", "--port", "{port}", "--no-access-log"])
    prefixes = {name: f"ab-{secrets.token_hex(4)}:" for name, _tree in args.tree}
    stores = {name: store_args(args.redis, prefix) if args.redis else [] for name, prefix in prefixes.items()}
    gateways = {name: Child(name, ["-m", "gateway", "serve", "--port", "{port}", "--upstream", core.url,
                                   "--no-access-log", "--gc-gen0", str(args.gc_gen0),
                                   "--usage-db", scratch_usage_db(), *stores[name]],
                            tree=tree)
                for name, tree in args.tree}
    results: list[Stats] = []
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            for conc in args.concurrency:
                ops: dict[str, list[Any]] = {}
                front: dict[str, Child] = {}
                for scenario in args.scenario:
                    for name, gw in gateways.items():
                        make = makers(http, core, gw, gw)[scenario]
                        ops[f"{scenario}:{name}"] = [await make() for _ in range(conc)]
                        front[f"{scenario}:{name}"] = gw
                results.extend(await interleaved(ops, conc, args, front, core))
    finally:
        for child in (*gateways.values(), core):
            child.stop()
        if args.redis:
            for prefix in prefixes.values():
                delete_keys(args.redis, prefix)
    return results


def report(results: list[Stats], names: list[str]) -> None:
    print(f"{'scenario':<22}{'conc':>5}{'p50 ms':>10}{'p99 ms':>10}{'req/s':>10}{'CPU us/req':>12}")
    for r in results:
        print(f"{r.scenario:<22}{r.concurrency:>5}{r.p50_ms:>10.3f}{r.p99_ms:>10.3f}{r.rps:>10.1f}"
              f"{r.front_cpu_us_per_request or 0:>12.0f}")
    at = {(r.scenario, r.concurrency): r for r in results}
    base, other = names[0], names[-1]
    for (key, conc), r in at.items():
        scenario, name = key.split(":")
        if name != other or (f"{scenario}:{base}", conc) not in at:
            continue
        a = at[(f"{scenario}:{base}", conc)]
        print(f"{scenario} c={conc}: {other}/{base} p50 {r.p50_ms / a.p50_ms:.3f}, "
              f"CPU {(r.front_cpu_us_per_request or 0) / (a.front_cpu_us_per_request or 1):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__)
    parser.add_argument("--tree", action="append", required=True, type=lambda s: tuple(s.split("=", 1)),
                        help="NAME=DIR, twice: the first is the baseline")
    parser.add_argument("--scenario", type=lambda s: s.split(","), default=["translated", "bridged"])
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 32])
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--slice", type=float, default=0.5)
    parser.add_argument("--gc-gen0", type=int, default=10_000)
    parser.add_argument("--redis", default=None, help="run both gateways on this Redis store (redis://HOST:PORT/DB)")
    args = parser.parse_args()
    if len(args.tree) != 2:
        parser.error("give exactly two --tree NAME=DIR")
    report(asyncio.run(run(args)), [name for name, _ in args.tree])


if __name__ == "__main__":
    main()
