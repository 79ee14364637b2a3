"""``initialize`` answered locally from the upstream's ``server/discover`` (2025-11-25 basic/lifecycle
§Initialization, 2026-07-28 server/discover), the discover cache policy (2026-07-28 server/utilities §Caching), and
the handshake's order as a ``handle(event) -> actions`` machine (:class:`Handshake`).

The machine owns no I/O; the shell (``gateway.http.handshake``) performs its actions and feeds back events:

=============================  ======================================================================================
action                         the shell ...
=============================  ======================================================================================
``FetchDiscover()``            sends ``server/discover`` upstream; feeds back ``Discovered``, ``DiscoverRefused`` (a
                               JSON-RPC error) or ``DiscoverFailed`` (no answer)
``CacheDiscover(key, ...)``    keeps the result in its discover cache under ``key`` until ``expires_ms``
``SweepExpired()``             ends the expired sessions (each new session pays for that: no timer task needed)
``Verify(principal)``          records that the gateway vouches for the principal
``CountSessions(principal)``   counts the live sessions (stored and relayed); feeds back ``Counted``
``SaveSession(record, ...)``   stores the record; feeds back ``Saved`` with the store's counts right after the write
``DeleteSession(session_id)``  takes a stored record back (another replica took the last slot meanwhile)
``Fail(error)``                answers the ``initialize`` with a JSON-RPC error (the upstream could not be discovered)
``Refuse(rejection)``          answers with the rejection (a session limit is reached)
``Answer(result, session_id)``  answers with the ``InitializeResult`` and the new ``Mcp-Session-Id``
=============================  ======================================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias, assert_never

from adapters.admission import SessionCounts, SessionLimits, admit_session
from adapters.capabilities import BridgedFeatures, server_caps_to_legacy
from adapters.errors import ErrorValue, Rejection, UpstreamFault, translate_upstream_error, upstream_failure
from adapters.legacy_tasks import enabled as legacy_tasks_enabled
from adapters.peers import Peer, peer_record, with_notice
from adapters.protocol import LEGACY_VERSIONS, MODERN_VERSION, SERVER_INFO_META_KEY, negotiate_version
from adapters.records import SessionRecord
from adapters.results import Invalid, classify_result

# serverInfo is required in 2025 (2025-11-25 schema InitializeResult); when the upstream reports none we say who we are.
SYNTHETIC_SERVER_INFO = {"name": "mcp-legacy-gateway", "version": "0.1.0"}


def server_info_of(discover: Mapping[str, Any]) -> dict[str, Any]:
    """serverInfo from result ``_meta`` (final spec), else top-level (SEP-2575 draft), else synthesized."""
    meta = discover.get("_meta")
    for candidate in (meta.get(SERVER_INFO_META_KEY) if isinstance(meta, Mapping) else None,
                      discover.get("serverInfo")):
        if isinstance(candidate, Mapping) and isinstance(candidate.get("name"), str) \
                and isinstance(candidate.get("version"), str):
            return dict(candidate)
    return dict(SYNTHETIC_SERVER_INFO)


def check_discover(discover: Any) -> ErrorValue | None:
    """A discover result we can build a handshake from, or why not."""
    if not isinstance(discover, Mapping):
        return upstream_failure(UpstreamFault.INVALID_RESPONSE, "server/discover did not return an object")
    versions = discover.get("supportedVersions")
    if not isinstance(versions, list) or MODERN_VERSION not in versions:
        return upstream_failure(UpstreamFault.UNSUPPORTED_VERSION, f"the upstream does not list {MODERN_VERSION}")
    return None


def build_initialize_result(discover: Mapping[str, Any], requested_version: Any, features: BridgedFeatures,
                            offered: tuple[str, ...] = LEGACY_VERSIONS,
                            client_capabilities: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``offered``: the revisions the client's door negotiates (adapters.doors.offered_versions);
    ``client_capabilities``: the client's, as kept for its session (2025 tasks are offered only to a client that
    declared them: adapters.legacy_tasks)."""
    version = negotiate_version(requested_version, offered)
    tasks = legacy_tasks_enabled(client_capabilities, discover.get("capabilities"), version)
    result: dict[str, Any] = {
        "protocolVersion": version,
        "capabilities": server_caps_to_legacy(discover.get("capabilities"), features, tasks),
        "serverInfo": server_info_of(discover),
    }
    if isinstance(discover.get("instructions"), str):
        result["instructions"] = discover["instructions"]
    return result


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """Where and until when a cacheable result may be reused."""

    key: str
    expires_ms: int

    def fresh(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms


def cache_policy(result: Mapping[str, Any], principal: str, received_ms: int, name: str) -> CachePolicy:
    """2026-07-28 server/utilities §Caching: absent/negative ttl = 0 (stale at once); ``private`` never leaves the
    authorization context (the gateway is a shared intermediary); unknown scope = private."""
    ttl = result.get("ttlMs")
    ttl = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0 else 0
    scope = "public" if result.get("cacheScope") == "public" else "private"
    key = f"{name}|public" if scope == "public" else f"{name}|private|{principal}"
    return CachePolicy(key, received_ms + ttl)


def discover_cache_keys(principal: str) -> tuple[str, str]:
    """Lookup order for a cached discover: this principal's private entry, then the public one."""
    return (f"server/discover|private|{principal}", "server/discover|public")


def cached_discover(cache: Mapping[str, tuple[int, dict[str, Any]]], upstream: str, principal: str,
                    now_ms: int) -> dict[str, Any] | None:
    """A fresh discover result of ``upstream`` in ``cache`` (keyed ``<upstream>|<policy key>``, entries
    ``(expires_ms, result)``) this principal may reuse, or None: its private entry first, then the public one."""
    for key in discover_cache_keys(principal):
        cached = cache.get(f"{upstream}|{key}")
        if cached is not None and now_ms < cached[0]:
            return cached[1]
    return None


# --- the handshake's order ------------------------------------------------------------------------------------------
class HandshakeStep(StrEnum):
    START = "start"  # nothing asked yet
    DISCOVER = "discover"  # waiting for the upstream's server/discover
    ADMIT = "admit"  # waiting for the live session counts
    SAVE = "save"  # waiting for the store's counts right after the record's write
    DONE = "done"  # answered (or failed, or refused)


@dataclass(frozen=True, slots=True)
class HandshakeContext:
    """What the handshake knows before it asks anything: the ``initialize`` that passed the core's checks
    (``adapters.session.OpenSession``), the new session's id and upstream, and the gateway's settings."""

    request_id: Any  # the initialize's JSON-RPC id
    session_id: str
    principal: str
    peer: Peer
    version: str  # the negotiated revision (the door offers this one only)
    capabilities: dict[str, Any]  # the client's, masked by the peer's bridge policy
    client_info: dict[str, Any]
    upstream: str
    features: BridgedFeatures
    limits: SessionLimits
    verified: bool  # the gateway vouches for the principal (adapters.admission.gateway_verified)
    today: str  # for the peer's deprecation notice (adapters.peers.with_notice)


# Events
@dataclass(frozen=True, slots=True)
class Discovered:
    """The upstream answered ``server/discover`` with ``result`` (not yet checked) at ``now_ms``."""

    result: Any
    now_ms: int


@dataclass(frozen=True, slots=True)
class DiscoverRefused:
    """The upstream answered ``server/discover`` with a JSON-RPC error object."""

    error: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DiscoverFailed:
    """``server/discover`` got no answer (the hop failed); ``error`` is what the client receives."""

    error: ErrorValue


@dataclass(frozen=True, slots=True)
class Counted:
    """The live sessions: stored ones in total and of the principal, every unverified principal's (None: the
    principal is verified), and the relayed 2025 sessions of every replica (in total, of the principal)."""

    total: int
    own: int
    unverified: int | None
    relayed: int = 0
    relayed_own: int = 0


@dataclass(frozen=True, slots=True)
class Saved:
    """The store's counts right after the record's write, this session included (``unverified``: None when not
    asked for)."""

    total: int
    own: int
    unverified: int | None


HandshakeEvent: TypeAlias = Discovered | DiscoverRefused | DiscoverFailed | Counted | Saved


# Actions
@dataclass(frozen=True, slots=True)
class FetchDiscover:
    pass


@dataclass(frozen=True, slots=True)
class CacheDiscover:
    key: str  # the cache policy's key (adapters.handshake.cache_policy), without the upstream's name
    expires_ms: int
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SweepExpired:
    pass


@dataclass(frozen=True, slots=True)
class Verify:
    principal: str


@dataclass(frozen=True, slots=True)
class CountSessions:
    principal: str


@dataclass(frozen=True, slots=True)
class SaveSession:
    record: SessionRecord
    count_unverified: bool  # count the unverified sessions again right after the write


@dataclass(frozen=True, slots=True)
class DeleteSession:
    session_id: str


@dataclass(frozen=True, slots=True)
class Fail:
    error: ErrorValue


@dataclass(frozen=True, slots=True)
class Refuse:
    rejection: Rejection


@dataclass(frozen=True, slots=True)
class Answer:
    result: dict[str, Any]
    session_id: str


HandshakeAction: TypeAlias = (FetchDiscover | CacheDiscover | SweepExpired | Verify | CountSessions | SaveSession
                              | DeleteSession | Fail | Refuse | Answer)


class Handshake:
    """One ``initialize``, from the discover to the answer: the upstream is discovered (or its cached discover
    reused), the session admitted against the live counts, stored, admitted again against the counts its write
    left (docs/design/limits.md#what-a-client-can-make-the-gateway-hold), and answered. Events that do not fit
    the current step are ignored (nothing is asked twice)."""

    def __init__(self, ctx: HandshakeContext) -> None:
        self.ctx = ctx
        self.step = HandshakeStep.START
        self.discovered: dict[str, Any] | None = None
        self.record: SessionRecord | None = None

    def start(self, cached: dict[str, Any] | None, now_ms: int) -> list[HandshakeAction]:
        """Begin, with the fresh discover result the shell's cache holds for this principal (:func:`cached_discover`),
        if any: then the upstream is not asked."""
        if self.step is not HandshakeStep.START:
            return []
        if cached is None:
            self.step = HandshakeStep.DISCOVER
            return [FetchDiscover()]
        return self._admit(cached, now_ms)

    def handle(self, event: HandshakeEvent) -> list[HandshakeAction]:
        match event:
            case Discovered(result, now_ms):
                return self._discovered(result, now_ms) if self.step is HandshakeStep.DISCOVER else []
            case DiscoverRefused(error):
                return self._fail(translate_upstream_error(error)) if self.step is HandshakeStep.DISCOVER else []
            case DiscoverFailed(error):
                return self._fail(error) if self.step is HandshakeStep.DISCOVER else []
            case Counted():
                return self._counted(event) if self.step is HandshakeStep.ADMIT else []
            case Saved():
                return self._saved(event) if self.step is HandshakeStep.SAVE else []
            case _:
                assert_never(event)

    def _fail(self, error: ErrorValue) -> list[HandshakeAction]:
        self.step = HandshakeStep.DONE
        return [Fail(error)]

    def _discovered(self, payload: Any, now_ms: int) -> list[HandshakeAction]:
        outcome = classify_result("server/discover", payload)
        if isinstance(outcome, Invalid):
            return self._fail(outcome.error)
        problem = check_discover(payload)
        if problem is not None:
            return self._fail(problem)
        policy = cache_policy(payload, self.ctx.principal, now_ms, "server/discover")
        # ttlMs 0 (or absent) is stale at once (2026-07-28 server/utilities §Caching): nothing to keep.
        kept: list[HandshakeAction] = [CacheDiscover(policy.key, policy.expires_ms, payload)] \
            if policy.fresh(now_ms) else []
        return kept + self._admit(payload, now_ms)

    def _admit(self, discovered: dict[str, Any], now_ms: int) -> list[HandshakeAction]:
        ctx = self.ctx
        self.discovered, self.step = discovered, HandshakeStep.ADMIT
        self.record = SessionRecord(ctx.session_id, ctx.principal, ctx.version, ctx.capabilities, ctx.client_info,
                                    now_ms, now_ms, server_capabilities=dict(discovered.get("capabilities") or {}),
                                    pins=peer_record(ctx.peer), upstream=ctx.upstream)
        # Counted after the last wait before the write, so concurrent initializes on one process cannot all pass
        # one free slot; across replicas, the count the write itself makes settles it (Saved).
        verify: list[HandshakeAction] = [Verify(ctx.principal)] if ctx.verified else []
        return [SweepExpired(), *verify, CountSessions(ctx.principal)]

    def _counted(self, counts: Counted) -> list[HandshakeAction]:
        assert self.record is not None
        full = admit_session(SessionCounts(counts.total + counts.relayed, counts.own + counts.relayed_own,
                                           counts.unverified), self.ctx.limits, self.ctx.request_id)
        if full is not None:
            self.step = HandshakeStep.DONE
            return [Refuse(full)]
        self.step = HandshakeStep.SAVE
        return [SaveSession(self.record, counts.unverified is not None)]

    def _saved(self, counts: Saved) -> list[HandshakeAction]:
        """Replicas on one store count, then store, in two steps, so a handshake on another replica may take the
        last free slot in between. The store counts right after each write in the same step, so the count without
        this session says whether a slot was still free when it was stored. An unverified principal's session is
        counted again after its write: two replicas storing the last unverified slot at once may both take theirs
        back, never both keep it."""
        assert self.record is not None and self.discovered is not None
        ctx, self.step = self.ctx, HandshakeStep.DONE
        late = admit_session(SessionCounts(counts.total - 1, counts.own - 1,
                                           None if counts.unverified is None else counts.unverified - 1),
                             ctx.limits, ctx.request_id)
        if late is not None:
            return [DeleteSession(ctx.session_id), Refuse(late)]
        result = build_initialize_result(self.discovered, ctx.version, ctx.features, (ctx.version,), ctx.capabilities)
        return [Answer(with_notice(result, ctx.peer, ctx.today), ctx.session_id)]
