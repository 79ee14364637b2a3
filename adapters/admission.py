"""What a client may make the gateway hold: the pure admission decisions for new sessions and for what a
session keeps (its resource subscriptions, its cached roots).

A principal is *verified* once something checked its credential: the gateway itself (its ``[[tokens]]`` table,
or a later token validator: :func:`gateway_verified`) or the upstream, by answering a request that carried it
(:func:`answer_verifies`). Sessions of principals nobody verified yet share ``max_unverified_sessions``, so a
flood of made-up bearer tokens (each one a new principal) fills that allowance, never the whole table.

The shell counts (live sessions, a session's subscriptions, encoded sizes) and asks here; each answer is None
(admitted) or the error to send, whose message and ``data`` name the limit and its configured value, the same
shape as the bridge limits (:func:`adapters.errors.limit_error`). A refusal never touches existing sessions.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

from adapters.authz import PRINCIPAL_PREFIX
from adapters.bridge import BridgeLimits
from adapters.errors import ErrorValue, Rejection, limit_error, limit_rejection
from adapters.jsonwire import JsonValue, JsonView, dumps
from adapters.subscriptions import apply_subscribes

ANONYMOUS: Final = "anonymous"  # the principal of every request without a credential (adapters.classify)


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """The configured bounds (``[gateway.sessions]``)."""

    max_sessions: int = 50_000
    max_sessions_per_principal: int = 20_000
    max_unverified_sessions: int = 5_000  # a tenth of max_sessions: what unverified principals share
    max_initialize_bytes: int = 16_384
    max_subscriptions_per_session: int = 256
    max_subscription_bytes: int = 16_384
    max_cached_roots_bytes: int = 16_384
    max_header_maps_bytes: int = 16_384


@dataclass(frozen=True, slots=True)
class SessionCounts:
    """Live sessions now: in total, of the principal asking for one more (anonymous is one principal), and,
    when that principal is not verified, of every unverified principal together (None: it is verified)."""

    total: int
    of_principal: int
    unverified: int | None = None


def admit_session(counts: SessionCounts, limits: SessionLimits, ident: JsonValue) -> Rejection | None:
    """Room for one more session, or an HTTP 503 naming the bound that is full: the gateway is at capacity,
    which is not the client's fault and may pass (sessions end or expire), so not a 4xx. A verified principal is
    never refused for what unverified ones hold beyond their allowance."""
    if counts.total >= limits.max_sessions:
        return limit_rejection("max_sessions", limits.max_sessions, ident)
    if counts.of_principal >= limits.max_sessions_per_principal:
        return limit_rejection("max_sessions_per_principal", limits.max_sessions_per_principal, ident)
    if counts.unverified is not None and counts.unverified >= limits.max_unverified_sessions:
        return limit_rejection("max_unverified_sessions", limits.max_unverified_sessions, ident)
    return None


def gateway_verified(principal: str, named: Collection[str]) -> bool:
    """Whether the gateway itself vouches for ``principal`` at its handshake: a name its ``[[tokens]]`` table
    gives a token, ``anonymous`` (no credential: one principal, bounded by ``max_sessions_per_principal`` as
    ever, and nothing a flood could make up more of), or the principal of an access token the gateway verified
    itself (``[gateway.auth]``, :mod:`adapters.authz`)."""
    return principal == ANONYMOUS or principal in named or principal.startswith(PRINCIPAL_PREFIX)


@dataclass(frozen=True, slots=True)
class WaitingLoad:
    """What rounds waiting for their client hold in the store right after one more was counted there: rounds of
    its session, and the bytes of their records of its principal and in all."""

    of_session: int
    principal_bytes: int
    total_bytes: int


def waiting_ceilings(limits: BridgeLimits) -> WaitingLoad:
    """The most each count of a :class:`WaitingLoad` may reach: :func:`admit_waiting` refuses a load exactly when
    one count is past its ceiling (:func:`past_ceilings`). A shared store applies them in the step that counts the
    round, so a refused round is never written (gateway.session.store.Hold)."""
    return WaitingLoad(limits.max_pending_per_session, limits.max_waiting_bytes_per_principal,
                       limits.max_waiting_bytes)


def past_ceilings(load: WaitingLoad, ceilings: WaitingLoad) -> bool:
    """Whether one count of ``load`` is past its ceiling (:func:`waiting_ceilings`): the load is refused."""
    return (load.of_session > ceilings.of_session or load.principal_bytes > ceilings.principal_bytes
            or load.total_bytes > ceilings.total_bytes)


def admit_waiting(load: WaitingLoad, limits: BridgeLimits) -> ErrorValue | None:
    """A round about to wait for its client (or a backoff) is counted in the store first, where every replica's
    are: None when it fits, else the limit error it is refused with (the shell takes the count back, or a store that
    applied :func:`waiting_ceilings` never made it). Counted with
    the round included, so of replicas counting at once, none passes a bound both see full. A waiting round's
    record holds the request's arguments (a 900 KB argument is 900 KB per round): the byte bounds are what keep
    a principal's waiting calls from taking the store's and the replica's memory. Refused exactly when
    :func:`past_ceilings` says so, naming the first count past its ceiling."""
    most = waiting_ceilings(limits)
    if load.of_session > most.of_session:
        return limit_error("max_pending_per_session", limits.max_pending_per_session)
    if load.principal_bytes > most.principal_bytes:
        return limit_error("max_waiting_bytes_per_principal", limits.max_waiting_bytes_per_principal)
    if load.total_bytes > most.total_bytes:
        return limit_error("max_waiting_bytes", limits.max_waiting_bytes)
    return None


def answer_verifies(has_credential: bool, credential_went_upstream: bool) -> bool:
    """Whether an upstream's answer (any but HTTP 401/403, which fail the request) verifies the principal of the
    request it answers: only when it judged that principal's own credential (``auth = "forward"``). An upstream
    called with the gateway's credential, or none, checked nothing of the client's token."""
    return has_credential and credential_went_upstream


def initialize_size_error(capabilities: JsonValue, client_info: JsonValue, limits: SessionLimits) -> ErrorValue | None:
    """``clientInfo`` and ``capabilities`` are kept for the session's whole life: their encoded size together
    is bounded. Official SDK clients send well under 1 KiB (an icon given as a data: URI is the large case)."""
    size = len(dumps(capabilities)) + len(dumps(client_info))
    if size > limits.max_initialize_bytes:
        return limit_error("max_initialize_bytes", limits.max_initialize_bytes)
    return None


def subscription_error(current: Sequence[str], uri: str, limits: SessionLimits) -> ErrorValue | None:
    """A new URI beyond ``max_subscriptions_per_session``, or taking the session's URIs together (UTF-8) past
    ``max_subscription_bytes``, is refused: the count alone would let a few huge URIs hold megabytes. Re-subscribing
    to one already held is not a new entry (the set is kept without duplicates, subscriptions.apply_subscribes)."""
    if uri in current:
        return None
    if len(current) >= limits.max_subscriptions_per_session:
        return limit_error("max_subscriptions_per_session", limits.max_subscriptions_per_session)
    if sum(len(u.encode()) for u in (*current, uri)) > limits.max_subscription_bytes:
        return limit_error("max_subscription_bytes", limits.max_subscription_bytes)
    return None


def roots_cacheable(result: JsonView, limits: SessionLimits) -> bool:
    """A roots/list answer larger than ``max_cached_roots_bytes`` is used for its request but not kept: the next
    request asks the client again, which is correct, only slower (no error for the client to see)."""
    return len(dumps(result)) <= limits.max_cached_roots_bytes


def header_maps_storable(maps: JsonView, limits: SessionLimits) -> bool:
    """Whether a session's x-mcp-header maps go in its record, where every replica reads them; larger ones stay
    with the process that learned them (another replica learns them again on its first HEADER_MISMATCH), so no request
    parses them with its session record."""
    return len(dumps(maps)) <= limits.max_header_maps_bytes


def admit_changes(held: Sequence[str], changes: Sequence[tuple[str, bool] | None],
                  limits: SessionLimits) -> list[ErrorValue | None]:
    """For each subscription change queued for one turn, in order: None when it is applied, else the limit error
    it is refused with. Judged against the subscriptions as each earlier change of the turn leaves them, since
    changes that ran at once (a batch) each passed the per-request check against the same record. ``None``
    changes (a GET stream's listen) are always applied."""
    current, out = list(held), []
    for change in changes:
        error = subscription_error(current, change[0], limits) if change and change[1] else None
        if error is None and change:
            current = apply_subscribes(current, [change])
        out.append(error)
    return out
