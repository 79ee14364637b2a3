"""Configuration reload (per-peer pins, upstreams, tokens): ``SIGHUP`` or ``python -m gateway reload --pid PID``
re-reads the file.

``reload`` signals only a gateway that serves a file, and with ``--config FILE`` only the one serving FILE: the
file a process serves is read from its command line and working directory (``/proc``), so no second record can
go stale. Where ``/proc`` is missing (not Linux) the command cannot tell, and signals as asked.

A file that fails validation keeps the running configuration and logs why. A good one replaces the pins that
*new* sessions are opened under; live sessions keep the snapshot in their records (``SessionRecord.pins``) until
they end. Listen addresses, the default upstream, the embedded core and the session store are fixed at start;
named upstreams that the new file adds are connected, and changed ones are replaced for the requests that follow
(a 2025-era one's reverse bridge too; an "auto" one keeps the era the start-up probe found under its name, and
one a reload adds is probed by no one: "auto" passes it through).
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.config.settings import ConfigError, GatewayConfig, load_config
from gateway.session.runtime import Gateway, PinState, log

if TYPE_CHECKING:
    from gateway.http.reverse_bridges import ReverseBridges


def apply(gw: Gateway, config: GatewayConfig, core_url: str | None, bridges: ReverseBridges | None = None) -> None:
    """The new file's named upstreams, their reverse bridges (2025-era ones,
    docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge), then its pins: a request routed
    by the new pins finds its upstream served in its era."""
    from gateway.http.app import named_upstreams

    fresh = named_upstreams(config, core_url, gw.tap)
    for name, client in fresh.items():
        old = gw.upstreams.get(name)
        if old is not None and old.url == client.url:
            continue  # keep the warm connection pool
        gw.upstreams[name] = client
    if bridges is not None:
        bridges.reload(config)
    gw.set_pins(config, PinState.from_config(config, dict(os.environ)))


def reload_config(gw: Gateway, path: str | Path, core_url: str | None, bridges: ReverseBridges | None = None,
                  **overrides: object) -> bool:
    try:
        config = load_config(path, **overrides)
    except ConfigError as exc:
        log.error("reload refused, keeping the running configuration: %s", exc)
        return False
    apply(gw, config, core_url, bridges)
    log.info("configuration reloaded from %s: %d peer(s)", path, len(config.pins.peers))
    return True


def install_sighup(app: web.Application, path: str | Path, **overrides: object) -> None:
    """Reload on SIGHUP for the app's lifetime (the CLI's ``serve --config``)."""
    from gateway.http.keys import CORE_URL, GATEWAY, REVERSES

    async def on_startup(app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, lambda: reload_config(app[GATEWAY], path, app.get(CORE_URL),
                                                                     app.get(REVERSES), **overrides))

    async def on_cleanup(app: web.Application) -> None:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)


@dataclass(frozen=True, slots=True)
class Served:
    """What a process's command line says it serves: ``known`` False when it cannot be read."""

    known: bool
    config: str | None = None  # the absolute path of its --config file; None: it serves none


def served_by(pid: int, proc: Path = Path("/proc")) -> Served:
    try:
        argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
        cwd = os.readlink(proc / str(pid) / "cwd")
    except OSError:
        return Served(False)
    words = [a.decode(errors="surrogateescape") for a in argv]
    for i, word in enumerate(words):
        value = words[i + 1] if word == "--config" and i + 1 < len(words) else None
        value = word.removeprefix("--config=") if word.startswith("--config=") else value
        if value:
            return Served(True, os.path.normpath(os.path.join(cwd, value)))
    return Served(True)


def refusal(pid: int, config: str | None) -> str | None:
    """Why SIGHUP must not go to ``pid`` (one line), or None: a process serving no file would only be stopped
    by it (no handler), and one serving another file would reload that one, not ``config``."""
    served = served_by(pid)
    if not served.known:
        return None
    if served.config is None:
        return (f"reload: not sent: process {pid} serves no configuration file (started without --config), so "
                "SIGHUP would stop it instead")
    if config is not None and not _same(config, served.config):
        return (f"reload: not sent: process {pid} serves {served.config}, not {os.path.abspath(config)}: edit "
                "that file, or restart the gateway with --config naming this one")
    return None


def _same(given: str, served: str) -> bool:
    try:
        return os.path.samefile(given, served)
    except OSError:
        return os.path.realpath(given) == os.path.realpath(served)
