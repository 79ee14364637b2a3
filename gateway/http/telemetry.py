"""The telemetry endpoints of the gateway's app: ``GET /metrics`` (Prometheus) and ``GET /migration`` (the
migration dashboard, behind an admin token), and :func:`install_usage`, which wires the usage recorder into an app.

Admin token: taken from the environment variable named by ``[gateway.usage].admin_token_env`` (never from the
file); without it the page is disabled (403). Accepted as ``Authorization: Bearer``, or once as ``?token=``, which
is exchanged for an HttpOnly, SameSite=Strict cookie holding the token's SHA-256 and redirected away, so the token
does not stay in the address bar, the history or the refresh URL.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.config.usage import UsageConfig
from gateway.http.keys import REVERSES
from gateway.telemetry.dashboard import render_html
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.report import build_report
from gateway.telemetry.usage import USAGE, UsageRecorder, usage_context
from kit.usage_report import WindowError, parse_window

_COOKIE = "gw_admin"


def install_usage(app: web.Application, config: Any) -> UsageRecorder:
    """Wire usage recording into a gateway app: the store's lifetime (first in, last out, so exchanges ended at
    shutdown are still flushed), ``GET /metrics`` and ``GET /migration``."""
    usage = getattr(config, "usage", None) or UsageConfig()
    recorder = UsageRecorder(usage, Metrics(), session_idle_seconds=getattr(config, "session_idle_seconds", 3600.0))
    app.cleanup_ctx.insert(0, usage_context(recorder))
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/migration", handle_migration)
    return recorder


async def handle_metrics(request: web.Request) -> web.Response:
    recorder = request.app.get(USAGE)
    if recorder is None or recorder.metrics is None:
        return web.Response(status=404, text="usage recording is disabled\n")
    recorder.drain()  # fold what was noted since the last flush into the counters
    recorder.metrics.set_sessions(recorder.sessions.by_revision(recorder.clock_ms()))
    bridges = request.app.get(REVERSES)
    if bridges is not None and bridges.by_name:
        recorder.metrics.set_legacy_upstreams(bridges.upstreams())
    body = generate_latest(recorder.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def authorized(request: web.Request, expected: str) -> bool:
    given = request.headers.get("Authorization", "")
    if given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), expected.encode()):
        return True
    return hmac.compare_digest(request.cookies.get(_COOKIE, "").encode(), _digest(expected).encode())


async def handle_migration(request: web.Request) -> web.StreamResponse:
    recorder = request.app.get(USAGE)
    expected = os.environ.get(recorder.config.admin_token_env, "") if recorder is not None else ""
    if recorder is None or recorder.db is None or not expected:
        return web.Response(status=403, text="the migration dashboard is disabled (no admin token configured)\n")
    token = request.query.get("token")
    if token is not None and hmac.compare_digest(token.encode(), expected.encode()):
        rest = {k: v for k, v in request.query.items() if k != "token"}
        response = web.HTTPSeeOther(request.rel_url.with_query(rest))
        response.set_cookie(_COOKIE, _digest(expected), httponly=True, samesite="Strict", path="/migration")
        raise response
    if not authorized(request, expected):
        return web.Response(status=401, text="admin token required\n", headers={"WWW-Authenticate": "Bearer"})
    await recorder.flush()  # the page shows everything recorded so far
    try:
        window = parse_window(request.query.get("since", "30d"), recorder.config.retention_days)
    except WindowError as exc:
        return web.Response(status=400, text=f"since: {exc}\n")
    # The recorder's clock, so an injected one applies here too.
    report = await asyncio.to_thread(build_report, recorder.db, window, recorder.clock_ms(), {})
    if request.query.get("format") == "json":
        return web.json_response(report)
    return web.Response(text=render_html(report, recorder.config.dashboard_refresh_seconds), content_type="text/html")
