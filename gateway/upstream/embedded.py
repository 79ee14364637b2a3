"""The embedded core: ``python -m gateway serve`` without ``--upstream`` runs ``modern_server`` in the same
event loop on a loopback ephemeral port, and the gateway points at it (docs/design.md "The reference core").

Authorization: the gateway passes the client's bearer token through to this core. That is not the forbidden
token-passthrough pattern (2025-11-25 basic/security_best_practices §Token Passthrough) because the embedded core
is part of the same deployment and shares the gateway's audience; with ``--upstream`` pointing elsewhere, the
operator must make sure the same holds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from gateway.config.settings import GatewayConfig


def needs_embedded_core(config: GatewayConfig) -> bool:
    return config.upstream_url is None or any(u.url == "embedded" for u in config.pins.upstreams.values())


@asynccontextmanager
async def embedded_core(config: GatewayConfig) -> AsyncIterator[str | None]:
    """Yield the embedded core's loopback URL while it runs, or None when no upstream is ``embedded``."""
    if not needs_embedded_core(config):
        yield None
        return
    from modern_server.app import create_app as create_core
    from modern_server.config import load_config as load_core_config

    runner = web.AppRunner(create_core(load_core_config(config.core_config)))
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await runner.cleanup()
