"""``initialize``: performs the handshake's actions (``adapters.handshake.Handshake`` decides their order: the
upstream's ``server/discover``, cached per its ``ttlMs``/``cacheScope``, the session's admission and record, and the
``InitializeResult`` built from what the upstream discovered)."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any, assert_never

from aiohttp import web

from adapters import handshake as H
from adapters.admission import gateway_verified
from adapters.bridge import UpstreamError
from adapters.capabilities import client_caps_to_modern
from adapters.classify import Accepted
from adapters.peers import pick_upstream
from adapters.results import response
from adapters.session import OpenSession
from adapters.upstream import SessionView, build_discover
from gateway.http.answers import error_answer, rejection_response
from gateway.http.reverse_bridges import CANARY_PICK
from gateway.http.streams import json_response
from gateway.session.runtime import Gateway, log, new_id
from gateway.upstream.client import UpstreamFailure

# Entries in Gateway.discover_cache: private results are kept per principal, and any bearer token is one, so the
# cache is bounded; past the bound the oldest entry goes (a refetch, never a wrong answer).
DISCOVER_CACHE_MAX = 1024


def _cache_discover(cache: dict[str, tuple[int, dict[str, Any]]], key: str, entry: tuple[int, dict[str, Any]],
                    now: int) -> None:
    """Store ``entry``, first dropping every expired entry (a store follows an upstream round trip, so the walk
    is cheap beside it) and, at :data:`DISCOVER_CACHE_MAX`, the oldest ones (dicts keep insertion order)."""
    for stale in [k for k, (expires, _) in cache.items() if now >= expires or k == key]:
        del cache[stale]  # the entry's own key too: re-inserted last, as the newest
    while len(cache) >= DISCOVER_CACHE_MAX:
        del cache[next(iter(cache))]
    cache[key] = entry


async def open_session(request: web.Request, gw: Gateway, acc: Accepted, opening: OpenSession) -> web.Response:
    """``initialize`` passed the core's checks (``adapters.session``): perform what the handshake asks until it
    answers."""
    session_id = secrets.token_urlsafe(32)
    # A canary's pick made by the relay, where a 2025-era upstream could have taken it
    # (docs/design/eras.md#canary-splits-across-eras).
    upstream = request.get(CANARY_PICK) or pick_upstream(opening.peer, session_id, gw.pins.seed)
    view = SessionView(client_caps_to_modern(opening.capabilities), opening.client_info, None,
                       request.headers.get("Authorization"))
    ident = acc.message["id"]
    handshake = H.Handshake(H.HandshakeContext(
        ident, session_id, acc.principal, opening.peer, opening.version, opening.capabilities, opening.client_info,
        upstream, gw.config.features(), gw.config.sessions.session_limits,
        gateway_verified(acc.principal, gw.policy.tokens.values()), gw.today()))
    now = gw.clock()
    actions = handshake.start(H.cached_discover(gw.discover_cache, upstream, acc.principal, now), now)
    while actions:
        event: H.HandshakeEvent | None = None
        for action in actions:
            match action:
                case H.FetchDiscover():
                    event = await _discover(gw, view, upstream)
                case H.CacheDiscover(key, expires_ms, result):
                    _cache_discover(gw.discover_cache, f"{upstream}|{key}", (expires_ms, result), gw.clock())
                case H.SweepExpired():
                    await gw.sweep_expired()
                case H.Verify(principal):
                    await gw.verify(principal)
                case H.CountSessions(principal):
                    # The relayed 2025 sessions of every replica count too
                    # (docs/design/eras.md#relayed-sessions-count-against-the-gateways-session-limits).
                    (total, own), unverified, (relayed, relayed_own) = await asyncio.gather(
                        gw.store.count_sessions(principal), gw.store.count_unverified(principal),
                        gw.store.count_relayed(principal))
                    event = H.Counted(total, own, unverified, relayed, relayed_own)
                case H.SaveSession(record, count_unverified):
                    total, own = await gw.store.put_session(record)
                    after = await gw.store.count_unverified(record.principal) if count_unverified else None
                    event = H.Saved(total, own, after)
                case H.DeleteSession(sid):
                    await gw.store.delete_session(sid)
                case H.Fail(error):
                    if error.log:
                        log.warning("initialize: %s", error.log)
                    return error_answer(ident, error)
                case H.Refuse(rejection):
                    log.warning("initialize refused: %s", rejection.error.message)
                    return rejection_response(rejection)
                case H.Answer(result, sid):
                    return json_response(response(ident, result), headers={"Mcp-Session-Id": sid})
                case _:
                    assert_never(action)
        actions = handshake.handle(event) if event is not None else []
    raise AssertionError("the handshake ended without an answer")  # every path of the machine answers


async def _discover(gw: Gateway, view: SessionView, upstream: str) -> H.HandshakeEvent:
    """Ask ``upstream`` for its ``server/discover``: what came back, as the handshake's event."""
    try:
        answer = await gw.upstream_for(upstream).call(build_discover(new_id("d"), view), lambda _m: None)
    except UpstreamFailure as failure:
        return H.DiscoverFailed(failure.error)
    if isinstance(answer, UpstreamError):
        return H.DiscoverRefused(answer.error)
    return H.Discovered(answer.result, gw.clock())
