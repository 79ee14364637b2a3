"""The legacy session core: what one classified message on the MCP endpoint becomes, as actions.

``handle(accepted, context) -> tuple[Action, ...]`` is the one entry the shell calls after
``adapters.classify``: it owns the order of every protocol decision about a message (the handshake's checks,
a peer's sunset, the gateway's own answers, duplicate ids, notifications, the client's answers) and says what to
do, never doing it. The shell performs the actions in order (``gateway.http.perform``); everything it needs to
decide is in :class:`Context`, injected (today's date and time, the peer, the limits, the ids in flight), so this module
is tested without a loop, a store or a clock, like ``adapters.bridge``.

The kinds whose whole handling is I/O (a stream to open or resume, a session to end, a batch to fan out, a modern
request to pass through) become one action each: the decision there was ``adapters.classify``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Final, NamedTuple

from adapters import legacy_tasks as LT
from adapters import local
from adapters.admission import SessionLimits, initialize_size_error
from adapters.authz import ResourceServer, require_scopes
from adapters.authz import refusal as auth_refusal
from adapters.bridge import BridgeLimits, admit
from adapters.classify import Accepted, Kind
from adapters.errors import ErrorValue, Reason, Rejection, refusal, reject
from adapters.jsonwire import JsonObject, JsonValue, JsonView, members
from adapters.peers import (
    Peer,
    admit_initialize,
    admit_modern,
    legacy_answer_version,
    mask_capabilities,
    match_peer,
    peer_limits,
    scopes_kept,
    sunset_error,
    sunset_passed,
)
from adapters.protocol import CLIENT_INFO_META_KEY, LEGACY_VERSIONS, MODERN_VERSION, PROTOCOL_VERSION_META_KEY
from adapters.results import response
from adapters.tool_policy import OPEN, ToolPolicy, Verdict, decide_call, unknown_tool


class Context(NamedTuple):
    """What the shell knows that a decision needs. ``peer`` is the session's (None before one exists);
    ``in_flight`` holds the ids of the session's requests being bridged now; ``offered``, the revisions the door
    a handshake came through may negotiate (``adapters.doors``). A named tuple: one is made for every
    message, and it costs a fraction of a frozen dataclass."""

    today: str
    limits: BridgeLimits
    session_limits: SessionLimits
    peer: Peer | None = None
    peers: Sequence[Peer] = ()
    default_peer: Peer | None = None
    in_flight: Collection[JsonValue] = ()
    offered: tuple[str, ...] = LEGACY_VERSIONS  # the handshake revisions the client's door offers (/mcp: these)
    resource: ResourceServer | None = None  # [gateway.auth]: the challenge a scope step-up names (else None)
    now_ms: int | None = None  # epoch ms, for the 2025 tasks past their ttl (adapters.legacy_tasks.expired)


# --- actions -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Reply:
    """Answer with this JSON-RPC message at once (HTTP 200)."""

    message: JsonObject
    log: str | None = None  # an operator's warning to write beside it


@dataclass(frozen=True, slots=True)
class Acknowledge:
    """HTTP 202: a notification or a client's answer was taken."""


class SessionChange(Enum):
    """What the session record keeps of a message (the shell writes the record back once)."""

    LOG_LEVEL = "log_level"  # logging/setLevel (2025-11-25 server/utilities/logging)
    INITIALIZED = "initialized"  # notifications/initialized
    ROOTS_STALE = "roots_stale"  # notifications/roots/list_changed drops the cached roots


@dataclass(frozen=True, slots=True)
class UpdateSession:
    change: SessionChange
    value: str | bool | None = None  # the log level (LOG_LEVEL), True (INITIALIZED)


@dataclass(frozen=True, slots=True)
class OpenSession:
    """``initialize`` passed every check: discover the peer's upstream, keep a record, answer."""

    peer: Peer
    version: str
    capabilities: JsonObject  # masked by the peer's bridge policy
    client_info: JsonObject


@dataclass(frozen=True, slots=True)
class ChangeSubscription:
    ident: JsonValue
    params: JsonView
    subscribe: bool


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the request upstream through a bridge exchange bounded by ``limits`` (the peer's)."""

    ident: JsonValue
    limits: BridgeLimits


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop the session's request ``request_id`` wherever it runs (2025-11-25 basic/utilities/cancellation)."""

    request_id: str | int
    reason: str | None


@dataclass(frozen=True, slots=True)
class Deliver:
    """A client's answer to a request the gateway asked: to the exchange waiting for it, wherever it runs."""

    message: JsonObject


@dataclass(frozen=True, slots=True)
class Stream:
    """Open the standalone ``GET`` stream, resume one (``Last-Event-ID``), or end the session (``DELETE``): the
    stream-level kinds, performed by the shell as they are."""

    kind: Kind


@dataclass(frozen=True, slots=True)
class FanOut:
    """A 2025-03-26 batch: each element goes through :func:`handle` on its own, all at once."""

    elements: tuple[Accepted | Rejection, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class PassThrough:
    """A 2026-07-28 request of a peer allowed to send one: forwarded as it is to the peer's ``upstream``; a
    ``tools/list`` answer is filtered by the peer's ``tools`` policy."""

    upstream: str
    tools: ToolPolicy = OPEN


@dataclass(frozen=True, slots=True)
class Refuse:
    """An HTTP-level refusal (its status from ``adapters.errors.REJECTIONS``) rather than a JSON-RPC answer."""

    rejection: Rejection


Action = (Reply | Acknowledge | UpdateSession | OpenSession | ChangeSubscription | Forward | Cancel | Deliver
          | Stream | FanOut | PassThrough | Refuse)


# --- the entry ---------------------------------------------------------------------------------------------
def handle(accepted: Accepted, context: Context) -> tuple[Action, ...]:
    """The actions for one accepted message, in the order the shell performs them."""
    return _BY_KIND[accepted.kind](accepted, context)


def _reply(ident: JsonValue, result: JsonObject | None = None, error: ErrorValue | None = None) -> Reply:
    return Reply(response(ident, result) if error is None else response(ident, error=error))


def _request(accepted: Accepted, context: Context) -> tuple[Action, ...]:
    """A request on a live session: refused past its peer's sunset (a session opened before the sunset does not
    outlive it), answered here (``adapters.local.decide``), or forwarded once its id is admitted."""
    message, session, peer = accepted.message, accepted.session, context.peer
    assert session is not None and peer is not None, "a request on a session has its record and peer"
    ident, version = message["id"], session.protocol_version
    if sunset_passed(peer, context.today):
        return (_reply(ident, error=sunset_error(peer, version)),)
    if not scopes_kept(peer, accepted.grant):  # matched on scopes this request's token no longer holds
        return (_step_up(accepted, context, peer.scopes),)
    tasks = _legacy_tasks(accepted, context, peer)
    if tasks is not None:
        return tasks
    match local.decide(str(message["method"]), message.get("params") or {}, version):
        case local.Reply(result, error):
            return (_reply(ident, result, error),)
        case local.SetLevel(level):
            return UpdateSession(SessionChange.LOG_LEVEL, level), _reply(ident, {})
        case local.ChangeSubscription(params, subscribe):
            return (ChangeSubscription(ident, params, subscribe),)
        case local.Forward():
            denied = _tool_refusal(accepted, peer, context)
            if denied is not None:
                return (denied,)
            refused = admit(context.in_flight, ident, context.limits)
            if refused is not None:
                return (_reply(ident, error=refused),)
            return (Forward(ident, peer_limits(context.limits, peer)),)


def _legacy_tasks(accepted: Accepted, context: Context, peer: Peer) -> tuple[Action, ...] | None:
    """2025-11-25 tasks (adapters.legacy_tasks): a ``tasks/*`` request answered here or driven upstream, a
    task-augmented ``tools/call`` refused past the session's task bound; None for everything else."""
    message, session = accepted.message, accepted.session
    assert session is not None
    method, params, ident = str(message["method"]), members(message.get("params")), message["id"]
    on = LT.enabled(session.client_capabilities, session.server_capabilities, session.protocol_version)
    limits = peer_limits(context.limits, peer)
    if method in LT.METHODS:
        decided = LT.decide(method, params, session.legacy_tasks, on, context.now_ms)
        if isinstance(decided, LT.Answer):
            return (_reply(ident, decided.result, decided.error),)
        refused = admit(context.in_flight, ident, context.limits)
        return (_reply(ident, error=refused),) if refused is not None else (Forward(ident, limits),)
    if on and LT.augmented(method, params):
        full = LT.admit(session.legacy_tasks, limits.max_tasks_per_session, context.now_ms)
        return (_reply(ident, error=full),) if full is not None else None
    return None


def _tool_refusal(accepted: Accepted, peer: Peer, context: Context) -> Reply | Refuse | None:
    """A ``tools/call`` the peer's tool policy refuses (adapters.tool_policy): an unknown tool, or a scope to
    step up to. Scopes count only with a verified token and a challenge to name them in."""
    message = accepted.message
    if peer.tools.open or message["method"] != "tools/call":
        return None
    name = str(members(message.get("params")).get("name"))  # a str: local.decide validated the params
    grant = accepted.grant
    scopes = grant.scopes if grant is not None and context.resource is not None else None
    decision = decide_call(peer.tools, name, scopes)
    if decision.verdict is Verdict.HIDDEN:
        error = unknown_tool(name, peer.name)
        return Reply(response(message["id"], error=error), error.log)
    if decision.verdict is Verdict.STEP_UP:
        return _step_up(accepted, context, decision.scopes)
    return None


def _step_up(accepted: Accepted, context: Context, needed: Sequence[str]) -> Refuse:
    """403 ``insufficient_scope`` naming the scopes to ask for (2025-11-25 basic/authorization, Scope Challenge
    Handling); without a verified token or a challenge to send, a plain 403."""
    ident, grant = accepted.message.get("id"), accepted.grant
    if grant is None or context.resource is None:
        return Refuse(reject(Reason.INSUFFICIENT_SCOPE, f"this request needs scope {' '.join(needed)}", ident))
    failure = require_scopes(grant, needed)
    assert failure is not None, "called only when a needed scope is missing"
    return Refuse(auth_refusal(context.resource, failure, ident))


def _batch(accepted: Accepted, context: Context) -> FanOut | Refuse:
    """A 2025-03-26 batch fans out, unless a call in it needs a scope the token lacks: then the whole request is
    the 403 step-up challenge naming every scope it needs, and none of it runs. The challenge is an HTTP answer
    (2025-11-25 basic/authorization, "Scope Challenge Handling") that an element's error cannot carry, and a client
    that steps up sends the whole request again: an element that had run would run twice."""
    needed, names = _batch_step_up(accepted, context)
    if not needed:
        return FanOut(accepted.batch)
    grant, resource = accepted.grant, context.resource
    assert grant is not None and resource is not None, "a step-up is found only with a token and a challenge"
    failure = require_scopes(grant, needed)
    assert failure is not None, "a step-up names a scope the token lacks"
    detail = f"{failure.detail} for {', '.join(names)}: no element of the batch ran"
    return Refuse(auth_refusal(resource, replace(failure, detail=detail)))


def _batch_step_up(accepted: Accepted, context: Context) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The scopes a batch's requests need beyond its token's, and what needs them (the peer, or a tool's name)."""
    peer, grant = context.peer, accepted.grant
    if peer is None or grant is None or context.resource is None:
        return (), ()
    kept = scopes_kept(peer, grant)  # the peer was matched on scopes this token still holds
    needed: list[str] = [] if kept else list(peer.scopes)
    names: list[str] = [] if kept else [f"peer {peer.name}"]
    for element in accepted.batch:
        name = _called_tool(element)
        if name is None or peer.tools.open:
            continue
        decision = decide_call(peer.tools, name, grant.scopes)
        if decision.verdict is Verdict.STEP_UP:
            needed += decision.scopes
            names.append(name)
    return tuple(dict.fromkeys(needed)), tuple(dict.fromkeys(names))


def _called_tool(element: Accepted | Rejection) -> str | None:
    """The tool a batch element calls, when it is a ``tools/call`` naming one (anything else is its own answer)."""
    if not isinstance(element, Accepted) or element.kind is not Kind.REQUEST:
        return None
    params = element.message.get("params")
    name = params.get("name") if element.message.get("method") == "tools/call" and isinstance(params, dict) else None
    return name if isinstance(name, str) else None


def _notification(message: JsonObject) -> tuple[Action, ...]:
    route = local.route_notification(str(message["method"]))
    if route == "initialized":
        return (UpdateSession(SessionChange.INITIALIZED, True),)
    if route == "roots_changed":  # nothing goes upstream (2026-07-28 removed it)
        return (UpdateSession(SessionChange.ROOTS_STALE),)
    if route == "cancelled":  # one naming no valid request id is ignored (adapters.local.cancel_request)
        cancel = local.cancel_request(message.get("params"))
        return (Cancel(cancel.request_id, cancel.reason),) if cancel is not None else ()
    return ()


def _initialize(accepted: Accepted, context: Context) -> Reply | OpenSession:
    """The handshake's checks, in order: the peer and the version it may answer (2025-11-25 basic/lifecycle
    §Version Negotiation), the request against that revision, the peer's pins and sunset, the sizes kept."""
    message = accepted.message
    params = members(message.get("params"))
    info = members(params.get("clientInfo"))
    assert context.default_peer is not None, "initialize is decided with the configured peers"
    peer = match_peer(context.peers, context.default_peer, accepted.principal, info, accepted.grant)
    version = legacy_answer_version(peer, params.get("protocolVersion"), context.offered)
    problem = (local.check_request("initialize", version, params) or admit_initialize(peer, version, context.today)
               or initialize_size_error(params.get("capabilities"), params.get("clientInfo"),
                                        context.session_limits))
    if problem is not None:  # the operator sees why a client could not connect
        return Reply(response(message["id"], error=problem), problem.log)
    caps = mask_capabilities(members(params.get("capabilities")), peer)  # the peer's bridge policy (per-peer pins)
    return OpenSession(peer, version, dict(caps), dict(info))


def _modern(accepted: Accepted, context: Context) -> PassThrough | Refuse | Reply:
    """A 2026-07-28 request names its client in ``_meta`` (2026-07-28 basic §_meta): its peer's pins say whether
    it may send one (a legacy-pinned peer's probe is steered to ``initialize``) and which upstream serves it."""
    meta = members(members(accepted.message.get("params")).get("_meta"))
    assert context.default_peer is not None, "a modern request is decided with the configured peers"
    peer = match_peer(context.peers, context.default_peer, accepted.principal, meta.get(CLIENT_INFO_META_KEY),
                      accepted.grant)
    refused = admit_modern(peer, str(meta.get(PROTOCOL_VERSION_META_KEY, MODERN_VERSION)))
    if refused is not None:
        return Refuse(refusal(Reason.PINNED_TO_LEGACY, refused, accepted.message.get("id")))
    return _modern_tool_refusal(accepted, peer, context) or PassThrough(peer.upstream, peer.tools)


def _modern_tool_refusal(accepted: Accepted, peer: Peer, context: Context) -> Reply | Refuse | None:
    """The peer's tool policy on a 2026-07-28 ``tools/call`` too: the same answers as on a session. A name that
    is not a string is the upstream's to refuse (its params are not checked here)."""
    params = accepted.message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    if peer.tools.open or accepted.message.get("method") != "tools/call" or not isinstance(name, str):
        return None
    return _tool_refusal(accepted, peer, context)


def _notified(accepted: Accepted, context: Context) -> tuple[Action, ...]:
    return (*_notification(accepted.message), ACKNOWLEDGE)


def _answered(accepted: Accepted, context: Context) -> tuple[Action, ...]:
    return Deliver(accepted.message), ACKNOWLEDGE


def _stream(accepted: Accepted, context: Context) -> tuple[Action, ...]:
    return (_STREAMS[accepted.kind],)


ACKNOWLEDGE: Final = Acknowledge()
_STREAMS: Final = {kind: Stream(kind) for kind in (Kind.OPEN_STREAM, Kind.RESUME, Kind.DELETE)}
# The table of what each kind becomes (h11-style: the machine is a table, and a test checks it covers every Kind).
_BY_KIND: Final[Mapping[Kind, Callable[[Accepted, Context], tuple[Action, ...]]]] = {
    Kind.REQUEST: _request,
    Kind.NOTIFICATION: _notified,
    Kind.RESPONSE: _answered,
    Kind.INITIALIZE: lambda accepted, context: (_initialize(accepted, context),),
    Kind.OPEN_STREAM: _stream,
    Kind.RESUME: _stream,
    Kind.DELETE: _stream,
    Kind.BATCH: lambda accepted, context: (_batch(accepted, context),),
    Kind.MODERN: lambda accepted, context: (_modern(accepted, context),),
}
