"""A bare aiohttp reverse proxy that forwards the same bytes: the floor for a Python proxy on this machine.

``python -m bench.forwarder --port P --upstream URL``. It copies the request body and the headers a
2026-07-28 server needs, and streams the response back; no parsing, no validation, no sessions.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from aiohttp import web

from gateway.ops.loops import CHOICES, install

PASS = ("Accept", "Content-Type", "MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", "Authorization")
UPSTREAM = web.AppKey("upstream", str)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Context = Callable[[web.Application], AsyncIterator[None]]
CLIENT = web.AppKey("client", aiohttp.ClientSession)


async def forward(request: web.Request) -> web.StreamResponse:
    headers = {k: request.headers[k] for k in PASS if k in request.headers}
    body = await request.read()
    async with request.app[CLIENT].post(request.app[UPSTREAM], data=body, headers=headers) as upstream:
        response = web.StreamResponse(status=upstream.status,
                                      headers={"Content-Type": upstream.headers.get("Content-Type", "")})
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


async def _client(app: web.Application) -> AsyncIterator[None]:
    app[CLIENT] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    yield
    await app[CLIENT].close()


async def ready(request: web.Request) -> web.StreamResponse:
    """Always ready: the balancer's health check (``config/haproxy.example.cfg`` asks ``GET /readyz``) when three
    forwarders stand behind it as the replicas' floor (``bench.balancer.BalancedForwarders``)."""
    return web.Response(text="ready")


def serve(handler: Handler, context: Context) -> None:
    """The command line of the benchmark's bare proxies (``--port``, ``--upstream``, ``--loop``): ``handler`` on
    ``POST /mcp``, ``context`` in the app's ``cleanup_ctx``, the upstream URL under :data:`UPSTREAM`, and
    ``GET /readyz``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--loop", choices=CHOICES, default="asyncio")
    args = parser.parse_args()
    install(args.loop)
    app = web.Application()
    app[UPSTREAM] = args.upstream
    app.cleanup_ctx.append(context)
    app.router.add_post("/mcp", handler)
    app.router.add_get("/readyz", ready)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


def main() -> None:
    serve(forward, _client)


if __name__ == "__main__":
    main()
