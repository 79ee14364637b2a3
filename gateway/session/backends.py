"""Which session store a gateway runs on: ``[gateway.store] url`` (or ``serve --store``) picks it, and
:func:`store_lifetime` opens it for the app's lifetime and closes it at shutdown."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway.config.settings import GatewayConfig
from gateway.session.store import InMemoryStore, SessionStore, StoreUnavailable

log = logging.getLogger("gateway")


def open_store(config: GatewayConfig) -> SessionStore:
    """The in-process store without a URL (the default), else a Redis store (no connection is made yet)."""
    settings = config.store
    if settings.url is None:
        return InMemoryStore()
    from gateway.session.redis_store import RedisStore  # redis is only imported by gateways that use it

    return RedisStore(settings.url, idle_seconds=config.session_idle_seconds, prefix=settings.prefix,
                      timeout_seconds=settings.timeout_seconds)


@asynccontextmanager
async def store_lifetime(config: GatewayConfig, given: SessionStore | None = None) -> AsyncIterator[SessionStore]:
    """``given`` (a test's or an embedder's store, left open), else :func:`open_store`'s, closed at the end.

    A Redis that does not answer at start is logged, not fatal: requests are answered 503 until it is back
    (the same as when it fails later), so a gateway and its Redis can start in any order."""
    if given is not None:
        yield given
        return
    store = open_store(config)
    try:
        await store.ping()
    except StoreUnavailable as exc:
        log.warning("%s; requests are refused (503) until it answers", exc)
    try:
        yield store
    finally:
        await store.close()
