"""``python -m bench.usage [--seconds 8] [--rounds 3] [--concurrency 8]``: what usage recording costs.

Run by hand (not in tests). In one run it starts the core and two gateway processes that differ only in
``[gateway.usage] enabled`` (on: recorder + Prometheus + SQLite flushes; off: nothing recorded), then drives
the same mixed load through each in alternating rounds (off/on, then on/off, ...: drift and order hit both
alike; ``--aa`` runs two identical gateways to show the machine's noise floor):
translated legacy ``tools/call echo``, modern passthrough ``echo``, and bridged ``summarize_repo`` (two MRTR
rounds). It prints requests/second and gateway CPU microseconds per request for both, and the ratios. Gateway
CPU per request is the steadier number on a small machine; throughput shares the cores with the load and the
core, so it is noisier.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.clients import LegacyClient, ModernClient
from bench.procs import Child


async def _drive(url: str, seconds: float, concurrency: int) -> int:
    """Mixed load for ``seconds``; returns the number of requests completed."""
    done = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency * 2)) as http:
        legacy = [LegacyClient(http, url) for _ in range(concurrency)]
        await asyncio.gather(*(c.start() for c in legacy))
        modern = ModernClient(http, url)
        stop = time.perf_counter() + seconds

        async def worker(i: int) -> None:
            nonlocal done
            client, n = legacy[i], 0
            while time.perf_counter() < stop:
                n += 1
                if n % 10 == 0:
                    await client.call("summarize_repo", {"repo": "demo"})
                elif n % 2:
                    await client.call("echo", {"text": "hi"})
                else:
                    await modern.echo()
                done += 1
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return done


async def _round(child: Child, seconds: float, concurrency: int) -> tuple[float, float]:
    cpu = child.cpu_seconds()
    began = time.perf_counter()
    n = await _drive(child.url, seconds, concurrency)
    elapsed, used = time.perf_counter() - began, child.cpu_seconds() - cpu
    return n / elapsed, used / n * 1e6


def recording_cost_us(n: int = 20_000) -> float:
    """In-process microseconds per request spent in the recorder itself (a bridged request's observer, two
    action batches, its facts noted, its histograms; plus the drain that folds them): the steady part."""
    from adapters import bridge as B
    from adapters.doors import Transport
    from gateway.config.usage import UsageConfig
    from gateway.telemetry.metrics import Metrics
    from gateway.telemetry.usage import ExchangeObserver, UsageRecorder, facts_head

    recorder = UsageRecorder(UsageConfig(), Metrics())
    info = {"name": "bench-legacy", "version": "1"}
    final = B.Finish({"jsonrpc": "2.0", "id": 1, "result": {}})
    began = time.perf_counter()
    for _ in range(n):
        head = facts_head(int(time.time() * 1000), "legacy", "2025-11-25", "tools/call", True, info, None, None)
        observer = ExchangeObserver(recorder, head, ("legacy handshake",), Transport.STREAMABLE_HTTP.value,
                                    time.perf_counter())
        observer(None, [B.CallUpstream({})])
        observer(None, [final])
        observer.done()
    recorder.drain()  # the folding a flush or scrape does, amortized over the requests it covers
    return (time.perf_counter() - began) / n * 1e6


def _configs(folder: Path, same: bool) -> dict[str, Path]:
    """``same``: both gateways recording off (an A/A run: the noise floor of this machine)."""
    paths = {}
    on = "[gateway.usage]\nenabled = false\n" if same else f'[gateway.usage]\ndb = "{folder / "usage.sqlite3"}"\n'
    for name, body in (("off", "[gateway.usage]\nenabled = false\n"), ("on", on)):
        paths[name] = folder / f"{name}.toml"
        paths[name].write_text(body)
    return paths


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-usage-"))
    configs = _configs(folder, args.aa)
    core = Child("core", ["-m", "modern_server", "--host", "127.0.0.1", "--port", "{port}", "--no-access-log"])
    gateways = {name: Child(f"gateway-{name}", ["-m", "gateway", "serve", "--port", "{port}", "--upstream", core.url,
                                                "--config", str(path), "--no-access-log"])
                for name, path in configs.items()}
    results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    try:
        for _name, child in gateways.items():  # warm-up, not measured
            await _drive(child.url, min(2.0, args.seconds), args.concurrency)
        for i in range(args.rounds):
            for name in (("off", "on") if i % 2 == 0 else ("on", "off")):  # alternate who goes first
                results[name].append(await _round(gateways[name], args.seconds, args.concurrency))
    finally:
        for child in (*gateways.values(), core):
            child.stop()
    return {name: (statistics.median(r for r, _ in rows), statistics.median(c for _, c in rows))
            for name, rows in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.usage", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per measured round")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per configuration")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent legacy sessions")
    parser.add_argument("--aa", action="store_true", help="both gateways with recording off (noise floor)")
    args = parser.parse_args()
    out = asyncio.run(main_async(args))
    (off_rps, off_cpu), (on_rps, on_cpu) = out["off"], out["on"]
    print(f"{'recording':<10} {'req/s':>10} {'gateway CPU us/req':>20}")
    print(f"{'off':<10} {off_rps:>10.1f} {off_cpu:>20.1f}")
    print(f"{'on':<10} {on_rps:>10.1f} {on_cpu:>20.1f}")
    print(f"throughput ratio on/off: {on_rps / off_rps:.3f}  (cost {(1 - on_rps / off_rps) * 100:+.1f}%)")
    print(f"gateway CPU per request ratio on/off: {on_cpu / off_cpu:.3f}  (cost {(on_cpu / off_cpu - 1) * 100:+.1f}%)")
    steady = recording_cost_us()
    print(f"recorder in-process: {steady:.1f} us/request = {steady / off_cpu * 100:.1f}% of the gateway's "
          f"{off_cpu:.0f} us CPU per request")


if __name__ == "__main__":
    main()
