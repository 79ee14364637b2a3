"""``GET /healthz`` and ``GET /readyz`` (docs/design/replicas.md#replicas-relay-through-the-store): liveness, and
readiness naming the store or the upstream when one fails; no Origin or Host check applies to them."""

from __future__ import annotations

from typing import Any

from tests.gateway.session import test_redis_store as redis_tests
from tests.waiting import until

private_redis = redis_tests.private_redis  # its fixture, shared


async def status(client: Any, path: str, **headers: str) -> tuple[int, dict[str, Any]]:
    resp = await client.get(path, headers=headers)
    return resp.status, await resp.json()


async def test_health_on_the_in_memory_store(make_gateway, upstream) -> None:
    client = await make_gateway()
    foreign = {"Origin": "https://evil.example", "Host": "elsewhere.example"}  # a balancer's probe has neither
    assert await status(client, "/healthz", **foreign) == (200, {"status": "ok"})
    assert await status(client, "/readyz", **foreign) == (200, {"status": "ready"})
    await upstream.server.close()

    async def upstream_down() -> bool:
        code, body = await status(client, "/readyz")
        return code == 503 and set(body["failed"]) == {"upstream"}
    await until(upstream_down)
    assert (await status(client, "/healthz"))[0] == 200  # alive all the same


async def test_readyz_names_the_store_while_redis_is_down(make_gateway, upstream, private_redis) -> None:
    client = await make_gateway(store={"url": private_redis.url, "timeout_seconds": 0.5})
    assert await status(client, "/readyz") == (200, {"status": "ready"})
    private_redis.stop()
    code, body = await status(client, "/readyz")
    assert code == 503 and set(body["failed"]) == {"store"} and "Redis" in body["failed"]["store"]
    private_redis.start()

    async def ready() -> bool:
        return (await status(client, "/readyz"))[0] == 200
    await until(ready)
