"""Configuration reload (per-peer pins, upstreams, tokens): ``SIGHUP`` or ``python -m gateway reload --pid PID``
re-reads the file.

A file that fails validation keeps the running configuration and logs why. A good one replaces the pins that
*new* sessions are opened under; live sessions keep the snapshot in their records (``SessionRecord.pins``) until
they end. Listen addresses, the default upstream, the embedded core and the session store are fixed at start;
named upstreams that the new file adds are connected, and changed ones are replaced for the requests that follow.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from aiohttp import web

from gateway.config.settings import ConfigError, GatewayConfig, load_config
from gateway.session.runtime import Gateway, PinState, log


def apply(gw: Gateway, config: GatewayConfig, core_url: str | None) -> None:
    from gateway.http.app import named_upstreams

    fresh = named_upstreams(config, core_url, gw.tap)
    for name, client in fresh.items():
        old = gw.upstreams.get(name)
        if old is not None and old.url == client.url:
            continue  # keep the warm connection pool
        gw.upstreams[name] = client
    gw.set_pins(config, PinState.from_config(config, dict(os.environ)))


def reload_config(gw: Gateway, path: str | Path, core_url: str | None, **overrides: object) -> bool:
    try:
        config = load_config(path, **overrides)
    except ConfigError as exc:
        log.error("reload refused, keeping the running configuration: %s", exc)
        return False
    apply(gw, config, core_url)
    log.info("configuration reloaded from %s: %d peer(s)", path, len(config.pins.peers))
    return True


def install_sighup(app: web.Application, path: str | Path, **overrides: object) -> None:
    """Reload on SIGHUP for the app's lifetime (the CLI's ``serve --config``)."""
    from gateway.http.app import CORE_URL, GATEWAY

    async def on_startup(app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP,
                                lambda: reload_config(app[GATEWAY], path, app.get(CORE_URL), **overrides))

    async def on_cleanup(app: web.Application) -> None:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
