"""``GET /healthz`` and ``GET /readyz`` for load balancers (docs/design/replicas.md#replicas-relay-through-the-store;
``adapters.health`` decides the answers). Outside the MCP endpoint, so no Origin or Host check applies: a balancer's
probe has neither.

Readiness pings the session store on every request, fetches the trusted issuers' signing keys until it has them
(``[gateway.auth]``) (a shared store is the one thing replicas cannot serve
without), and opens a TCP connection to the default upstream at most once per :data:`UPSTREAM_CHECK_SECONDS`,
so a flood of probes costs the upstream nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from aiohttp import web
from yarl import URL

from adapters.health import Dependency, Readiness, liveness, readiness
from gateway.http.keys import AUTHZ, GATEWAY
from gateway.session.runtime import Gateway
from gateway.session.store import StoreUnavailable

UPSTREAM_CHECK_SECONDS = 1.0
CONNECT_SECONDS = 2.0


@dataclass
class UpstreamCheck:
    """The outcome of the last upstream check: when (loop time), and why it failed (None: reachable)."""

    at: float = float("-inf")
    failure: str | None = None


UPSTREAM_CHECK = web.AppKey("upstream_check", UpstreamCheck)


async def on_healthz(request: web.Request) -> web.Response:
    answer = _answer(liveness())
    gw = request.app.get(GATEWAY)
    if gw is not None:  # which process answered: workers share a port (gateway.ops.workers)
        answer.headers["X-Gateway-Replica"] = gw.replica
    return answer


async def on_readyz(request: web.Request) -> web.Response:
    gw = request.app.get(GATEWAY)
    if gw is None:  # before start-up finished or after shutdown began
        return _answer(readiness({Dependency.STORE: "not started", Dependency.UPSTREAM: "not started"}))
    failed: dict[Dependency, str] = {}
    store_failure = await _store_failure(gw)
    if store_failure is not None:
        failed[Dependency.STORE] = store_failure
    upstream_failure = await _upstream_failure(request.app[UPSTREAM_CHECK], gw.upstream.url)
    if upstream_failure is not None:
        failed[Dependency.UPSTREAM] = upstream_failure
    validator = request.app.get(AUTHZ)
    keys_failure = await validator.keys_failure() if validator is not None else None
    if keys_failure is not None:  # no token could be verified: send clients elsewhere
        failed[Dependency.AUTHORIZATION] = keys_failure
    return _answer(readiness(failed))


async def _store_failure(gw: Gateway) -> str | None:
    ping = getattr(gw.store, "ping", None)  # the in-memory store cannot fail
    if ping is None:
        return None
    try:
        await ping()
    except StoreUnavailable as exc:
        return str(exc)
    return None


async def _upstream_failure(check: UpstreamCheck, url: str) -> str | None:
    now = asyncio.get_running_loop().time()
    if now - check.at >= UPSTREAM_CHECK_SECONDS:
        check.at, check.failure = now, await _connect_failure(URL(url))
    return check.failure


async def _connect_failure(url: URL) -> str | None:
    """Whether a TCP connection to the upstream opens (what the gateway needs first; MCP itself is judged by
    the start-up probe, gateway.ops.probe)."""
    try:
        async with asyncio.timeout(CONNECT_SECONDS):
            _reader, writer = await asyncio.open_connection(url.host, url.port)
    except TimeoutError:
        return f"no connection to {url.host}:{url.port} within {CONNECT_SECONDS} s"
    except OSError as exc:
        return f"cannot connect to {url.host}:{url.port}: {exc.strerror or exc}"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


def _answer(verdict: Readiness) -> web.Response:
    return web.json_response(verdict.body, status=verdict.status, headers={"Cache-Control": "no-store"})


def add_health_routes(app: web.Application, *, replicated: bool = False) -> None:
    """``replicated`` (a shared store): every answer also names the replica that gave it (``X-Gateway-Replica``),
    so an operator, or a test behind a load balancer, can tell where each request of a session went."""
    app[UPSTREAM_CHECK] = UpstreamCheck()
    app.router.add_get("/healthz", on_healthz)
    app.router.add_get("/readyz", on_readyz)
    if replicated:
        app.on_response_prepare.append(name_replica)


async def name_replica(request: web.Request, response: web.StreamResponse) -> None:
    gw = request.app.get(GATEWAY)
    if gw is not None:
        response.headers["X-Gateway-Replica"] = gw.replica
