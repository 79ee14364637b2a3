"""The embedded core: ``python -m gateway serve`` without ``--upstream`` runs ``modern_server`` in the same
event loop on a loopback ephemeral port, and the gateway points at it (docs/design.md "The reference core").

Authorization: the gateway passes the client's bearer token through to this core. That is not the forbidden
token-passthrough pattern (2025-11-25 basic/security_best_practices §Token Passthrough) because the embedded core
is part of the same deployment and shares the gateway's audience; with ``--upstream`` pointing elsewhere, the
operator must make sure the same holds.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from aiohttp import web

from gateway.config.settings import GatewayConfig
from modern_server.config import CoreConfig
from modern_server.config import load_config as load_core_config

CORE_DATABASE = "embedded-core.sqlite3"
EMBEDDED_SHUTDOWN_SECONDS = 0.5  # how long the core's handlers still running at exit are waited for


def needs_embedded_core(config: GatewayConfig) -> bool:
    return config.upstream_url is None or any(u.url == "embedded" for u in config.pins.upstreams.values())


@asynccontextmanager
async def embedded_core(config: GatewayConfig) -> AsyncIterator[str | None]:
    """Yield the embedded core's loopback URL while it runs, or None when no upstream is ``embedded``."""
    if not needs_embedded_core(config):
        yield None
        return
    from modern_server.app import create_app as create_core

    with state_dir(config) as folder:
        # The gateway's access log is the one that matters; the core's internal requests are logged only when
        # asked for, under their own logger.
        access = logging.getLogger("modern_server.access") if config.embedded_access_log else None
        # The core stops after the gateway's own handlers ended: what still runs there serves no client any more,
        # and waiting for it (aiohttp's default is a minute) would hold the exit past shutdown_timeout_seconds.
        runner = web.AppRunner(create_core(embedded_settings(config, folder)), access_log=access,
                               shutdown_timeout=EMBEDDED_SHUTDOWN_SECONDS)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            await runner.cleanup()


@contextmanager
def state_dir(config: GatewayConfig) -> Iterator[Path]:
    """Where the embedded core keeps its database: ``state_dir``, else beside the usage database (``serve``
    keeps both, so notes outlive a restart), else a temporary directory removed at exit (an app whose usage
    store is in memory, as in the tests: nothing is left behind)."""
    if config.state_dir is not None or config.usage.db is not None:
        folder = Path(config.state_dir or Path(config.usage.db or ".").resolve().parent)
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="mcp-core-") as temporary:
        yield Path(temporary)


def embedded_settings(config: GatewayConfig, folder: Path) -> CoreConfig:
    """The core's own configuration (``core_config``), with its database under ``folder`` unless the file names
    one, and ``embedded_workspace`` added to the anonymous principal's workspaces, so the user's own roots (a
    client's ``roots/list``) are scanned rather than skipped."""
    core = load_core_config(config.core_config)
    updates: dict[str, object] = {}
    if core.public_url is None and config.public_base() is not None:
        updates["public_url"] = config.public_base()  # its pages are reached through the gateway (http.pages)
    if core.database is None:
        updates["database"] = str(folder / CORE_DATABASE)
    anonymous = core.anonymous_principal
    if config.embedded_workspace and anonymous is not None:
        uri = Path(config.embedded_workspace).resolve().as_uri()
        held = core.workspaces.get(anonymous, ())
        updates["workspaces"] = {**core.workspaces, anonymous: held if uri in held else (*held, uri)}
    return core.model_copy(update=updates)
