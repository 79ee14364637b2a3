"""Where the WebSocket and HTTP+SSE doors reach the gateway's own ``/mcp`` (the hop), and how many door
sessions may be open at once.

Each message of a door session is one loopback request to ``/mcp``
(docs/design/doors.md#the-stdio-httpsse-and-websocket-doors-are-clients-of-the-streamable-http-door), and a session
holds up to :func:`door_connections` of them at once, two descriptors each (both ends). Served on the client port
they counted against ``max_client_connections``: one WebSocket whose calls waited on sampling held every slot, and
other clients were refused. So ``serve`` (gateway.ops.connections) also serves the app on a Unix socket in a private
temporary folder, as the stdio door does, which the connection cap never sees; door sessions are bounded instead, all
of them together, by ``door_max_sessions`` (a WebSocket upgrade or ``GET /sse`` over it gets 503). A server with no
hop (a plain runner) lets doors reach ``/mcp`` on the address their client used. A door session also ends as soon as
its client's connection is gone (:func:`serve_until_gone`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from adapters.errors import limit_rejection
from gateway.config.settings import GatewayConfig
from gateway.http.answers import rejection_response

HOP_ENDPOINT = "http://localhost/mcp"  # on the hop's Unix socket: a loopback name for the Host check
GONE_POLL_SECONDS = 0.2  # how soon a door session notices that its client's connection is gone
PROBE_SECONDS = 1.0  # how often a door session that may not be reading its client writes to it (a ping)
_TCP_ESTABLISHED = 1  # tcp_info.tcpi_state (Linux include/net/tcp_states.h)


@dataclass
class DoorHop:
    """The app's door hop: set by the server that runs one; the door sessions open count against ``limit``."""

    path: str | None = None  # the private Unix socket serving this app
    limit: int = 0  # door sessions open at once; 0: unbounded
    open: int = 0


HOP = web.AppKey("door_hop", DoorHop)


def install_door_hop(app: web.Application) -> None:
    if HOP not in app:
        app[HOP] = DoorHop()


def door_connections(config: GatewayConfig) -> int:
    """One door session's loopback connections at most: its messages served at once, the forwarded requests its
    session may have waiting on the client (the endpoint refuses more), its GET stream and its ending."""
    return config.connections.door_max_in_flight + config.limits.max_pending_per_session + 2


# A door's hop is a loopback client of this gateway's own /mcp: how long a call may take is decided there (the
# upstream read timeout, the answer timeout of a bridged round waiting on a person), so the hop adds no total
# bound of its own. aiohttp's default (300 s in all) cut a bridged call waiting longer on the client off with
# an internal error; only the connect, to this process, is bounded.
DOOR_HOP_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10.0)


def door_session(config: GatewayConfig, hop: DoorHop) -> aiohttp.ClientSession:
    """The client session a WebSocket or HTTP+SSE door session sends its calls through."""
    return aiohttp.ClientSession(connector=door_connector(config, hop), timeout=DOOR_HOP_TIMEOUT)


def door_connector(config: GatewayConfig, hop: DoorHop) -> aiohttp.BaseConnector:
    if hop.path is not None:
        return aiohttp.UnixConnector(path=hop.path, limit=door_connections(config))
    return aiohttp.TCPConnector(limit=door_connections(config))


def door_endpoint(request: web.Request) -> tuple[str, str | None]:
    """The URL a door POSTs to, and the Host it names when not the URL's."""
    if request.app[HOP].path is not None:
        return HOP_ENDPOINT, None
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    address, port = (sockname[0], sockname[1]) if sockname else ("127.0.0.1", 80)
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}/mcp", f"localhost:{port}"


def enter_door(request: web.Request) -> web.Response | None:
    """Counts a new door session in, or the 503 that refuses it when ``door_max_sessions`` are open."""
    hop = request.app[HOP]
    if hop.limit and hop.open >= hop.limit:
        return rejection_response(limit_rejection("door_max_sessions", hop.limit))
    hop.open += 1
    return None


def leave_door(request: web.Request) -> None:
    request.app[HOP].open -= 1


async def serve_until_gone(request: web.Request, serving: Coroutine[Any, Any, None],
                           probe: Callable[[], Awaitable[None]] | None = None) -> None:
    """Runs a door session's ``serving`` until it ends or the client's connection is lost, whichever comes first.

    aiohttp does not cancel the handler of a lost connection (``handler_cancellation`` stays off,
    gateway/http/passthrough.py), and a WebSocket still yields the frames it read before the loss: a door
    served a departed client's buffered flood for seconds, and one waiting for a place among its messages in
    flight (all of them waiting on the upstream) never noticed the client leave. ``probe`` (a WebSocket ping),
    sent every :data:`PROBE_SECONDS`: a client that closed its socket with frames still unsent (its FIN waits
    behind them) answers anything written to it with a reset, which :func:`client_gone` then sees."""
    task, watch = asyncio.ensure_future(serving), asyncio.ensure_future(_gone(request, probe))
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        task.cancel()
        watch.cancel()
        await asyncio.gather(task, watch, return_exceptions=True)
    error = None if task.cancelled() else task.exception()
    if error is not None:
        raise error


def client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing() or _peer_left(transport.get_extra_info("socket"))


def _peer_left(sock: socket.socket | None) -> bool:
    """The kernel's word that the client reset or closed its end (the TCP state is no longer established). A
    transport learns it only by reading, and a door whose client floods it has paused reading (its frames wait
    unread): the kernel's view is then the only one. Where TCP_INFO is not offered, False."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6) or not hasattr(socket, "TCP_INFO"):
        return False
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != _TCP_ESTABLISHED
    except OSError:
        return False


async def _gone(request: web.Request, probe: Callable[[], Awaitable[None]] | None) -> None:
    loop = asyncio.get_running_loop()
    probed = loop.time()
    while not client_gone(request):  # aiohttp offers no event for a lost connection
        await asyncio.sleep(GONE_POLL_SECONDS)
        if probe is not None and loop.time() - probed >= PROBE_SECONDS:
            probed = loop.time()
            with contextlib.suppress(aiohttp.ClientError, ConnectionError, RuntimeError, TimeoutError):
                async with asyncio.timeout(GONE_POLL_SECONDS):  # a client that does not read: the outbox's case
                    await probe()
