"""``initialize``: the peer's pins, the upstream's ``server/discover`` (cached per its ``ttlMs``/``cacheScope``),
the session record, and the ``InitializeResult`` built from what the upstream discovered."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from aiohttp import web

from adapters.admission import SessionCounts, admit_session, gateway_verified
from adapters.bridge import UpstreamError
from adapters.capabilities import client_caps_to_modern
from adapters.classify import Accepted
from adapters.errors import ErrorValue, Rejection, translate_upstream_error
from adapters.handshake import build_initialize_result, cache_policy, check_discover, discover_cache_keys
from adapters.peers import peer_record, pick_upstream, with_notice
from adapters.records import SessionRecord
from adapters.results import Invalid, classify_result, response
from adapters.session import OpenSession
from adapters.upstream import SessionView, build_discover
from gateway.http.answers import error_answer, rejection_response
from gateway.http.streams import json_response
from gateway.session.runtime import Gateway, log, new_id
from gateway.upstream.client import UpstreamFailure

# Entries in Gateway.discover_cache: private results are kept per principal, and any bearer token is one, so the
# cache is bounded; past the bound the oldest entry goes (a refetch, never a wrong answer).
DISCOVER_CACHE_MAX = 1024


async def discover(gw: Gateway, principal: str, view: SessionView,
                   upstream: str = "default") -> dict[str, Any] | ErrorValue:
    """The upstream's discover result, cached per upstream and its ttlMs/cacheScope (private = per principal;
    stale results are not kept, and the cache is bounded)."""
    now = gw.clock()
    for key in discover_cache_keys(principal):
        cached = gw.discover_cache.get(f"{upstream}|{key}")
        if cached is not None and now < cached[0]:
            return cached[1]
    try:
        answer = await gw.upstream_for(upstream).call(build_discover(new_id("d"), view), lambda _m: None)
    except UpstreamFailure as failure:
        return failure.error
    if isinstance(answer, UpstreamError):
        return translate_upstream_error(answer.error)
    payload = answer.result
    outcome = classify_result("server/discover", payload)
    if isinstance(outcome, Invalid):
        return outcome.error
    assert isinstance(payload, dict)  # classify_result: a result that is not an object is Invalid
    problem = check_discover(payload)
    if problem is not None:
        return problem
    policy = cache_policy(payload, principal, now, "server/discover")
    # ttlMs 0 (or absent) is stale at once (2026-07-28 server/utilities §Caching): nothing to keep.
    if policy.fresh(now):
        _cache_discover(gw.discover_cache, f"{upstream}|{policy.key}", (policy.expires_ms, payload), now)
    return payload


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
    """``initialize`` passed the core's checks (``adapters.session``): discover the peer's upstream, admit the
    session against the live counts, keep its record and answer with its id."""
    message, peer, version = acc.message, opening.peer, opening.version
    session_id = secrets.token_urlsafe(32)
    upstream = pick_upstream(peer, session_id, gw.pins.seed)
    view = SessionView(client_caps_to_modern(opening.capabilities), opening.client_info, None,
                       request.headers.get("Authorization"))
    found = await discover(gw, acc.principal, view, upstream)
    if isinstance(found, ErrorValue):
        if found.log:
            log.warning("initialize: %s", found.log)
        return error_answer(message["id"], found)
    now = gw.clock()
    record = SessionRecord(session_id, acc.principal, version, opening.capabilities, opening.client_info, now, now,
                           server_capabilities=dict(found.get("capabilities") or {}), pins=peer_record(peer),
                           upstream=upstream)
    await gw.sweep_expired()  # each new session pays for ending the expired ones: no timer task needed
    if gateway_verified(acc.principal, gw.policy.tokens.values()):
        await gw.verify(acc.principal)
    # Counted after the last wait before the put, so concurrent initializes on one process cannot all pass one free
    # slot; across replicas, the count the put itself makes settles it.
    # The relayed 2025 sessions of every replica count too
    # (docs/design/eras.md#relayed-sessions-count-against-the-gateways-session-limits).
    (total, own), unverified, (relayed, relayed_own) = await asyncio.gather(
        gw.store.count_sessions(acc.principal), gw.store.count_unverified(acc.principal),
        gw.store.count_relayed(acc.principal))
    full = admit_session(SessionCounts(total + relayed, own + relayed_own, unverified),
                         gw.config.sessions.session_limits, message["id"])
    if full is None:
        full = await _store_admitted(gw, record, message["id"], unverified is not None)
    if full is not None:
        log.warning("initialize refused: %s", full.error.message)
        return rejection_response(full)
    result = with_notice(build_initialize_result(found, version, gw.config.features(), (version,),
                                                 opening.capabilities), peer, gw.today())
    return json_response(response(message["id"], result), headers={"Mcp-Session-Id": record.session_id})


async def _store_admitted(gw: Gateway, record: SessionRecord, ident: Any, unverified: bool) -> Rejection | None:
    """Store the admitted session, or take it back: replicas on one store count, then store, in two steps, so a
    handshake on another replica may take the last free slot in between. The store counts right after each write in
    the same step, so the count without this session says whether a slot was still free when it was stored
    (docs/design/limits.md#what-a-client-can-make-the-gateway-hold). An unverified principal's session is counted
    again after its write: two replicas storing the last unverified slot at once may both take theirs back, never
    both keep it."""
    total, own = await gw.store.put_session(record)
    after = await gw.store.count_unverified(record.principal) if unverified else None
    late = admit_session(SessionCounts(total - 1, own - 1, None if after is None else after - 1),
                         gw.config.sessions.session_limits, ident)
    if late is not None:
        await gw.store.delete_session(record.session_id)
    return late
