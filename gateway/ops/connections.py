"""Client connections: the cap on how many are open at once (``max_client_connections``) and the server
``python -m gateway serve`` runs with it.

Why a cap: every connection holds a file descriptor. Past ``ulimit -n`` the kernel refuses ``accept()`` itself,
every new client then times out, and asyncio logs each failed accept; an idle flood took the gateway down that
way. Under the cap no accept fails: a connection over it is closed as soon as it is accepted, before any of its
bytes are read, and the descriptors stay available for the upstream connections that served clients need.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web

from gateway.config.settings import GatewayConfig
from gateway.http.door_hop import HOP, door_connections
from gateway.http.keys import GATEWAY

log = logging.getLogger("gateway.ops.connections")
# Descriptors kept for everything but client and upstream connections: listening sockets, the usage store,
# log files, the embedded core's listener.
RESERVED_FDS = 64
_UNLIMITED_FDS = 1 << 20  # what an unlimited RLIMIT_NOFILE is taken as
# What ``serve`` raises RLIMIT_NOFILE's soft limit to, when the hard limit allows: a 1024 soft limit (a common
# default) leaves room for one door session; this one, for about 240 of them and tens of thousands of clients.
RAISED_FDS = 65536


def _client_descriptors(config: GatewayConfig, soft_limit: int | None) -> int:
    """What RLIMIT_NOFILE leaves after :data:`RESERVED_FDS` and the upstream connections
    (``upstream_max_connections`` + ``upstream_max_stream_connections``), these taking at most half of it."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        soft_limit = _UNLIMITED_FDS
    usable = max(0, soft_limit - RESERVED_FDS)
    return usable - min(config.upstream_max_connections + config.upstream_max_stream_connections, usable // 2)


def door_descriptors(config: GatewayConfig) -> int:
    """What one door session may hold: two descriptors (both ends) per loopback connection of its hop."""
    return 2 * door_connections(config)


def door_cap(config: GatewayConfig, soft_limit: int | None = None) -> int:
    """``door_max_sessions``, or when it is 0: as many door sessions as half of what the upstream connections
    leave can hold descriptors for (:func:`door_descriptors`), at least one. At ``ulimit -n 1024`` with the
    default door bounds (132 descriptors a session): 1; at 65536: 243."""
    configured = config.connections.door_max_sessions
    if configured:
        return configured
    return max(1, _client_descriptors(config, soft_limit) // 2 // door_descriptors(config))


def derived_cap(config: GatewayConfig, soft_limit: int | None = None) -> int:
    """``max_client_connections`` when it is 0: what RLIMIT_NOFILE leaves after :data:`RESERVED_FDS`, the
    upstream connections and the door sessions' hops (:func:`door_cap` of them). At ``ulimit -n 1024``: 348;
    at a raised limit (the benchmark's) most of it."""
    rest = _client_descriptors(config, soft_limit) - door_cap(config, soft_limit) * door_descriptors(config)
    return max(1, rest)


def client_cap(config: GatewayConfig) -> int:
    return config.connections.max_client_connections or derived_cap(config)


class ConnectionCap:
    """Counts open client connections; :meth:`factory` wraps a server's protocol factory with the cap."""

    def __init__(self, limit: int) -> None:
        self.limit, self.open, self.refused = limit, 0, 0

    def factory(self, inner: Callable[[], Any]) -> Callable[[], asyncio.BaseProtocol]:
        def make() -> asyncio.BaseProtocol:
            if self.open >= self.limit:
                self.refused += 1
                log.warning("client connection refused: max_client_connections (%d) are open", self.limit)
                return _Refused()
            protocol = _Counted(inner(), self)
            self.open += 1
            return protocol
        return make


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server's transport; no FIN handshake to wait on, nothing read: the descriptor is freed at once.
        cast(asyncio.Transport, transport).abort()


class _Counted(asyncio.Protocol):
    """The server's own protocol for one connection, seen through so its end can be counted."""

    __slots__ = ("_cap", "_inner", "_open")

    def __init__(self, inner: Any, cap: ConnectionCap) -> None:
        self._inner, self._cap, self._open = inner, cap, True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._open:  # the transport calls this once; the guard keeps the count right even if not
            self._open = False
            self._cap.open -= 1
        self._inner.connection_lost(exc)


class CappedRunner(web.AppRunner):
    """An AppRunner whose sites accept through the cap: a site asks ``runner.server`` for its protocol factory,
    while the runner's own shutdown and cleanup use the real server. It also serves the app, uncapped, on the
    doors' hop (gateway.http.door_hop): a Unix socket in a private temporary folder, kept until the app's
    shutdown is over, since the doors' endings send their DELETE through it."""

    def __init__(self, app: web.Application, cap: ConnectionCap, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.cap = cap
        self.hop: asyncio.AbstractServer | None = None
        self.hop_folder: str | None = None

    @property
    def server(self) -> Any:
        inner = super().server
        return None if inner is None else self.cap.factory(inner)

    async def setup(self) -> None:
        await super().setup()
        hop, inner = self.app.get(HOP), super().server
        if hop is None or inner is None:
            return
        self.hop_folder = tempfile.mkdtemp(prefix="mcp-gateway-doors-")
        path = os.path.join(self.hop_folder, "doors.sock")
        self.hop = await asyncio.get_running_loop().create_unix_server(inner, path)
        hop.path, hop.limit = path, door_cap(self.app[GATEWAY].config)

    async def cleanup(self) -> None:
        try:
            await super().cleanup()
        finally:
            if self.hop is not None:
                self.hop.close()
            if self.hop_folder is not None:
                shutil.rmtree(self.hop_folder, ignore_errors=True)


async def serve_forever(app: web.Application, host: str, port: int, limit: int, reuse_port: bool = False,
                        bound: Callable[[int], None] | None = None, **runner_args: Any) -> None:
    """What ``web.run_app`` does, with the cap; ``reuse_port``: one of several workers on the same port
    (gateway.ops.workers); ``bound``: called with the port once the socket is bound (the banner comes only then).
    SIGINT/SIGTERM end it gracefully: the site stops accepting, then the app shuts down while every other task still
    runs (docs/design/takeover.md#sigterm-hands-the-rounds-over: exchanges hand their rounds over as they end). The
    signal only sets an event: aiohttp's own handler raises out of the loop, and ``asyncio.run`` would then cancel
    every task at once, before the app's shutdown could reach them."""
    runner = CappedRunner(app, ConnectionCap(limit), handle_signals=False, **runner_args)
    await runner.setup()
    stop, loop = asyncio.Event(), asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        site = web.TCPSite(runner, host, port, reuse_port=reuse_port or None)
        await site.start()
        print(f"======== Running on {site.name} (max_client_connections {limit}) ========", flush=True)
        if bound is not None:
            bound(runner.addresses[0][1] if runner.addresses else port)
        await stop.wait()
    finally:
        await runner.cleanup()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def raise_descriptor_limit(config: GatewayConfig) -> None:
    """Raise RLIMIT_NOFILE's soft limit to min(hard, :data:`RAISED_FDS`) when it is lower, as servers commonly do
    at start (the caps are derived from it after this); when the hard limit keeps it lower, warn that door
    sessions are few and what to change."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = RAISED_FDS if hard == resource.RLIM_INFINITY else min(hard, RAISED_FDS)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("descriptor limit raised from %d to %d", soft, target)
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("descriptor limit not raised from %d: %s", soft, exc)
    if soft != resource.RLIM_INFINITY and soft < RAISED_FDS:
        log.warning("descriptor limit is %d (hard limit %s): door_max_sessions is %d and max_client_connections "
                    "%d; raise the hard limit (ulimit -n, LimitNOFILE) to %d for more", soft,
                    "unlimited" if hard == resource.RLIM_INFINITY else hard, door_cap(config), client_cap(config),
                    RAISED_FDS)


def run(app: web.Application, config: GatewayConfig, reuse_port: bool = False,
        bound: Callable[[int], None] | None = None, **runner_args: Any) -> None:
    raise_descriptor_limit(config)  # before the caps are derived from it
    try:
        asyncio.run(serve_forever(app, config.host, config.port, client_cap(config), reuse_port, bound,
                                  **runner_args))
    except (web.GracefulExit, KeyboardInterrupt):  # the signal's exit: cleanup already ran as the task ended
        pass


# Why a socket cannot be bound, per errno, and what the operator changes for each.
_LISTEN_HINTS = {
    errno.EADDRINUSE: "another process holds the port? pick another with --port",
    errno.EADDRNOTAVAIL: "{host} is not an address of this machine: pick one of its addresses with --host "
                         "(0.0.0.0 for all)",
    errno.EACCES: "ports below 1024 need privileges: pick one from 1024 up with --port",
}


def listen_refusal(exc: OSError, host: str, port: int) -> str | None:
    """The one line saying why ``host:port`` cannot be listened on and what to change, or None for an error that
    is not the operator's choice of address (a bug, left to its traceback)."""
    where = f"cannot listen on {host}:{port}"
    if isinstance(exc, socket.gaierror):
        return f"{where}: {host} does not resolve ({exc.strerror}): pick an address with --host"
    hint = _LISTEN_HINTS.get(exc.errno or 0)
    if hint is None:
        return None
    return f"{where}: {os.strerror(exc.errno or 0)} ({hint.format(host=host)})"
