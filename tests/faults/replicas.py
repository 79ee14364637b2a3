"""Replicas as real processes for the takeover tests: gateway processes on one Redis, a failover front that sends
each new connection to the first replica that accepts it (what a load balancer does once a health check fails),
and an upstream proxy in front of the reference core that can hold an answer back, so a replica can be killed
after the core acted on a round and before the gateway answered the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.faults.procs import Proc
from tests.proxy import pump


def replica(tmp: Path, name: str, upstream_url: str, redis_url: str, prefix: str, lease_seconds: float = 1.0,
            extra: str = "") -> Proc:
    """``python -m gateway serve`` on a shared Redis (short lease, fast client retries)."""
    config = tmp / f"{name}.toml"
    config.write_text(f"""[gateway]
sse_retry_ms = 100
{extra}
[gateway.store]
prefix = "{prefix}"
lease_seconds = {lease_seconds}
""")
    return Proc(name, ["-m", "gateway", "serve", "--upstream", upstream_url, "--store", redis_url, "--port", "{port}",
                       "--config", str(config), "--usage-db", str(tmp / f"{name}-usage.sqlite3"), "--no-access-log"],
                tmp)


class Front:
    """A loopback TCP front: each connection goes to the first of ``ports`` that accepts it; with ``rotate``, the
    first tried moves on by one each connection (round robin, skipping replicas that do not accept). ``ports`` may be
    changed as replicas are replaced."""

    def __init__(self, ports: list[int], *, rotate: bool = False) -> None:
        self.ports, self.used = ports, [0] * len(ports)
        self.rotate, self._turn = rotate, 0
        self._tasks: set[asyncio.Task] = set()

    def _order(self) -> list[tuple[int, int]]:
        order = list(enumerate(self.ports))
        if not self.rotate:
            return order
        self._turn += 1
        start = self._turn % len(order)
        return order[start:] + order[:start]

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/mcp"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            for index, port in self._order():
                try:
                    up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    continue
                self.used[index] += 1
                await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
                return
            writer.close()
        except asyncio.CancelledError:  # closed by the test: asyncio would log a cancelled connection callback
            writer.close()
        finally:
            self._tasks.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def close(self) -> None:
        self.server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class HoldingUpstream:
    """Forwards every request to the core; the first request ``hold`` picks gets its answer from the core and then
    nothing (the connection stays open until the gateway goes): the core acted, the gateway never heard."""

    def __init__(self, core_url: str, hold: Callable[[dict[str, Any]], bool] = lambda body: False) -> None:
        self.core_url, self.hold = core_url, hold
        self.bodies: list[dict[str, Any]] = []
        self.held = asyncio.Event()
        self.answers: list[bytes] = []  # what the core answered to every request held back

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/mcp", self.forward)
        app.cleanup_ctx.append(self._client)
        return app

    async def _client(self, _app: web.Application) -> Any:
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        yield
        await self.http.close()

    async def forward(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = await request.json()
        self.bodies.append(body)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        held = not self.held.is_set() and self.hold(body)
        async with self.http.post(self.core_url, data=raw, headers=headers) as answer:
            if held:
                self.answers.append(await answer.read())
                self.held.set()
                await asyncio.Event().wait()  # until the gateway hangs up (this handler is then cancelled)
            out = web.StreamResponse(status=answer.status, headers={
                k: v for k, v in answer.headers.items() if k.lower() not in ("content-length", "transfer-encoding",
                                                                               "connection", "date", "server")})
            await out.prepare(request)
            async for chunk in answer.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    def calls(self, tool: str) -> list[dict[str, Any]]:
        return [b for b in self.bodies if b.get("method") == "tools/call" and b["params"].get("name") == tool]
