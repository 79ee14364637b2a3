"""The Redis store beside the in-memory one, in the same run (docs/benchmarks.md "The Redis store"): a gateway on
``--store redis://…`` (one process) and one with ``--workers 2`` on the same Redis, each under a key prefix of
this run (its keys are deleted at the end, never the database); what an idle session holds in Redis
(``MEMORY USAGE`` over every key of the prefix, before and after opening the sessions); and the ratios.

Redis: ``--redis URL``, else ``REDIS_URL``, else ``redis://127.0.0.1:6379/0`` when it answers; ``--redis ""``
leaves the Redis scenarios out.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from typing import Any

import aiohttp

from bench.clients import LegacyClient
from bench.procs import Child, scratch_usage_db

# Scenario -> the in-memory scenario it is compared with.
REDIS_SCENARIOS = {"translated_redis": "translated", "bridged_redis": "bridged"}
WORKERS_SCENARIO = "translated_workers2"  # translated on Redis with serve --workers 2: throughput against 1
DEFAULT_URL = "redis://127.0.0.1:6379/0"


def resolve_url(given: str | None) -> str | None:
    """The Redis the run uses, or None (not asked for and none answering, or ``--redis ""``)."""
    if given is not None:
        return given or None
    url = os.environ.get("REDIS_URL") or DEFAULT_URL
    return url if _answers(url) else None


def _answers(url: str) -> bool:
    try:
        import redis as sync_redis

        return bool(sync_redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5).ping())
    except Exception:
        return False


class RedisGateways:
    """The two gateways on Redis (started at once, stopped by :meth:`stop`) and the run's key prefix."""

    def __init__(self, url: str, upstream: str, extra: list[str]) -> None:
        self.url, self.prefix = url, f"bench-{secrets.token_hex(4)}:"
        common = ["-m", "gateway", "serve", "--port", "{port}", "--upstream", upstream, "--no-access-log",
                  *store_args(url, self.prefix), *extra]
        self.one = Child("gateway-redis", [*common, "--usage-db", scratch_usage_db()])
        try:
            self.two = Child("gateway-redis-workers2", [*common, "--workers", "2", "--usage-db", scratch_usage_db()])
        except BaseException:
            self.one.stop()
            delete_keys(url, self.prefix)
            raise

    def stop(self) -> None:
        for child in (self.one, self.two):
            child.stop()
        delete_keys(self.url, self.prefix)


def store_args(url: str, prefix: str) -> list[str]:
    """The ``serve`` options that put a gateway on ``url`` under key prefix ``prefix`` (a config file in a
    directory of its own)."""
    config = os.path.join(tempfile.mkdtemp(prefix="gateway-bench-redis-"), "store.toml")
    with open(config, "w") as handle:
        handle.write(f'[gateway.store]\nprefix = "{prefix}"\n')
    return ["--store", url, "--config", config]


def delete_keys(url: str, prefix: str) -> None:
    import redis as sync_redis

    client = sync_redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start:start + 1000])
    finally:
        client.close()


def redis_bytes(url: str, prefix: str) -> int:
    """``MEMORY USAGE`` summed over every key of ``prefix`` (nested values sampled whole: ``SAMPLES 0``)."""
    import redis as sync_redis

    client = sync_redis.Redis.from_url(url)
    try:
        total = 0
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            total += int(client.memory_usage(key, samples=0) or 0)
        return total
    finally:
        client.close()


async def idle_bytes(http: aiohttp.ClientSession, gateways: RedisGateways, count: int) -> dict[str, Any]:
    """Open ``count`` legacy sessions on the Redis gateway, each with its GET stream (as the memory figure is
    taken), and read what the prefix holds in Redis before and after: bytes per idle session."""
    await asyncio.sleep(0.5)  # the scenarios' rounds and ownership records are released
    before = redis_bytes(gateways.url, gateways.prefix)
    clients = [LegacyClient(http, gateways.one.url) for _ in range(count)]
    streams: list[aiohttp.ClientResponse] = []
    for batch in range(0, count, 100):
        group = clients[batch:batch + 100]
        await asyncio.gather(*(c.start() for c in group))
        streams.extend(await asyncio.gather(*(c.open_get_stream() for c in group)))
    await asyncio.sleep(0.5)
    after = redis_bytes(gateways.url, gateways.prefix)
    for stream in streams:
        stream.close()
    return {"sessions": count, "bytes_per_session": round((after - before) / count)}


def redis_ratios(at: dict[tuple[str, int], Any], conc: int) -> dict[str, Any]:
    """Redis against memory at ``conc``: median latency and the gateway's CPU per request of each scenario, and the
    throughput of two workers against one (all on Redis)."""
    out: dict[str, Any] = {}
    for redis_name, memory_name in REDIS_SCENARIOS.items():
        if (redis_name, conc) not in at:
            return {}
        on_redis, in_memory = at[(redis_name, conc)], at[(memory_name, conc)]
        out[f"{memory_name} redis/memory p50"] = round(on_redis.p50_ms / in_memory.p50_ms, 3)
        cpu = (on_redis.front_cpu_us_per_request, in_memory.front_cpu_us_per_request)
        out[f"{memory_name} redis/memory cpu"] = round(cpu[0] / cpu[1], 3) if cpu[0] and cpu[1] else None
    if (WORKERS_SCENARIO, conc) in at:
        out["translated workers2/workers1 throughput"] = round(at[(WORKERS_SCENARIO, conc)].rps
                                                               / at[("translated_redis", conc)].rps, 3)
    return out
