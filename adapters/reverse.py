"""The reverse bridge's rules (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): the
upstream session pool, the sealed ``requestState`` claims, and one bridged call as a pure ``handle(state, event) ->
(state, actions)`` machine.

A 2025-11-25 server asks its client live (``sampling/createMessage``, ``elicitation/create``, ``roots/list``
on a session stream: 2025-11-25 basic/transports); a 2026-07-28 client is only ever asked in a result
(``input_required``: 2026-07-28 basic/patterns §Multi Round-Trip Requests). The machine turns the first into the
second: the legacy call stays parked while its client answers, and each retry's ``inputResponses`` become the
JSON-RPC responses the legacy server waits for. The shell (gateway.http.reverse) reads the legacy streams, seals
the claims, keeps the parked calls and performs the actions:

=============================  ======================================================================
action                         the shell ...
=============================  ======================================================================
``AnswerServer(id, r, e)``     POSTs the JSON-RPC response to the legacy server's request ``id``
``AskClient(requests, round)`` answers the client ``input_required`` with a sealed state for ``round``
``Finish(result, error)``      answers the client (the final result, or an error)
``CancelServer(reason)``       sends ``notifications/cancelled`` for the call (2025-11-25 cancellation)
=============================  ======================================================================
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, assert_never

from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY

from adapters import errors as E
from adapters.errors import ErrorValue
from adapters.protocol import INPUT_REQUEST_METHODS, MRTR_METHODS
from adapters.reverse_listen import LOG_MESSAGE, log_wanted
from adapters.reverse_wire import complete_result, modern_error

# A client's name or version sealed into a relayed session's id: bounded, as usage labels are (adapters.usage).
_CLIENT_LABEL_MAX = 64


# --- the pool --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PoolKey:
    """What makes two legacy sessions differ: whose (never shared across principals), what the server may ask
    of the client (its capabilities), and who the client says it is (2025-11-25 basic/lifecycle)."""

    principal: str
    capabilities: str  # canonical JSON
    client_info: str  # canonical JSON


@dataclass(frozen=True, slots=True)
class PoolLimits:
    max_sessions: int = 256
    idle_seconds: float = 300.0


@dataclass(frozen=True, slots=True)
class Entry:
    """A pooled session as the rules see it: when it was last used, and how many calls it carries now (a
    parked call counts: its session must live until it ends)."""

    last_used_ms: int
    busy: int = 0


@dataclass(frozen=True, slots=True)
class Reuse:
    key: PoolKey


@dataclass(frozen=True, slots=True)
class Open:
    evict: tuple[PoolKey, ...] = ()  # idle sessions closed to make room, least recently used first


@dataclass(frozen=True, slots=True)
class Full:
    error: ErrorValue


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def pool_key(principal: str, capabilities: Mapping[str, Any], client_info: Mapping[str, Any]) -> PoolKey:
    usable = {k: v for k, v in capabilities.items() if k in ("roots", "sampling", "elicitation", "experimental")}
    return PoolKey(principal, canonical(usable), canonical(dict(client_info)))


def plan(entries: Mapping[PoolKey, Entry], key: PoolKey, limits: PoolLimits) -> Reuse | Open | Full:
    """Reuse the key's session, or open one, closing the least recently used idle session when the pool is full;
    a pool full of busy sessions refuses (a session is never taken from a call in progress)."""
    if key in entries:
        return Reuse(key)
    if len(entries) < limits.max_sessions:
        return Open()
    idle = sorted((e.last_used_ms, k.principal, k.capabilities, k.client_info, k)
                  for k, e in entries.items() if e.busy == 0)
    if not idle:
        return Full(E.limit_error("reverse.max_sessions", limits.max_sessions))
    return Open((idle[0][-1],))


def expired(entries: Mapping[PoolKey, Entry], now_ms: int, limits: PoolLimits) -> tuple[PoolKey, ...]:
    """The sessions to close now: idle (no call) for longer than ``idle_seconds``."""
    cutoff = now_ms - int(limits.idle_seconds * 1000)
    return tuple(k for k, e in entries.items() if e.busy == 0 and e.last_used_ms <= cutoff)


def reinitialize(status: int) -> bool:
    """A 404 to a request carrying the session id: the session is gone, start a new one (2025-11-25
    basic/transports §Session Management). The request was not taken, so it may be sent again once."""
    return status == 404


def owner_of_unrelated(calls: Collection[str]) -> str | None:
    """A server request on the session's GET stream names no call (2025-11-25 basic/transports §Listening):
    it belongs to the session's only call in progress; with none or several it cannot be placed."""
    return next(iter(calls)) if len(calls) == 1 else None


# --- the sealed state ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Claims:
    """What a ``requestState`` the gateway mints binds (2026-07-28 basic/patterns §Multi Round-Trip Requests,
    "integrity-protected ... bind the principal, an expiry and the request"): the parked call, the round it
    answers, who asked, the method, name and arguments digest of the request, and when it expires."""

    call: str
    round: int
    principal: str
    method: str
    name: str
    digest: str
    expires_ms: int
    replica: str = ""  # the replica the call is parked on: its upstream connection is there

    def encode(self) -> bytes:
        return canonical([self.call, self.round, self.principal, self.method, self.name, self.digest,
                          self.expires_ms, self.replica]).encode()


def digest(params: Mapping[str, Any]) -> str:
    """The request's identity for its retries: everything but ``_meta`` and the MRTR fields (a retry with other
    arguments is another request)."""
    kept = {k: v for k, v in params.items() if k not in ("_meta", "inputResponses", "requestState")}
    return hashlib.sha256(canonical(kept).encode()).hexdigest()


def decode_claims(raw: bytes) -> Claims | None:
    try:
        values = json.loads(raw)
        return Claims(*values) if isinstance(values, list) and len(values) == 8 else None
    except (ValueError, TypeError):
        return None


def held_elsewhere(claims: Claims | None, me: str) -> str | None:
    """The replica a retry's call is parked on when that is not this one: the retry is relayed there through the
    store (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge), checked here first on all
    it binds but the round, which only the holder knows. None: the call is (or was) here, or the state is not one of
    ours."""
    return claims.replica if claims is not None and claims.replica and claims.replica != me else None


def relayed_claims(claims: Claims, retry: Claims) -> Claims:
    """What a retry is checked on before it is relayed: its own request against the state, the call and round
    as the state names them (the holder checks those)."""
    return replace(retry, call=claims.call, round=claims.round, replica=claims.replica)


def holder_gone() -> ErrorValue:
    """A retry whose call was parked on a replica that is gone: the call went with its upstream connection; the
    client sends the request again without a state (2026-07-28 basic/transports: a broken stream loses the
    request). INVALID_PARAMS like every unusable state, with a message saying what to do."""
    return ErrorValue(E.INVALID_PARAMS, "invalid requestState: the gateway replica holding this call is gone; "
                      "send the request again without requestState", {"requestState": "invalid"})


# --- 2025 clients of a 2025-era upstream: relayed as they are ----------------------------------------------
@dataclass(frozen=True, slots=True)
class RelayedSession:
    """What the gateway's ``Mcp-Session-Id`` of a relayed 2025 session binds (sealed by the shell like a state):
    the named upstream whose session it is, that server's own session id (passed back to it, never read), whose
    it is, and the ``clientInfo`` name and version its ``initialize`` gave (usage labels and the peer of its later
    requests, docs/design/eras.md#relayed-2025-requests-are-counted-in-the-usage-report). The id itself says where a
    request goes, on any replica, with nothing stored."""

    upstream: str
    session_id: str
    principal: str
    client: str = ""
    client_version: str = ""

    def encode(self) -> bytes:
        return canonical([self.upstream, self.session_id, self.principal, self.client, self.client_version]).encode()

    def lease_key(self) -> str:
        """The opaque key every replica counts this session by in the store
        (docs/design/eras.md#relayed-sessions-count-against-the-gateways-session-limits): a digest of the upstream
        and the server's id, so the store holds nothing a request could be sent with."""
        return lease_key(self.upstream, self.session_id)

    def client_info(self) -> dict[str, str] | None:
        """The ``clientInfo`` its ``initialize`` gave (name and version only), or None when it gave none."""
        return {"name": self.client, "version": self.client_version} if self.client else None


def lease_key(upstream: str, session_id: str) -> str:
    """:meth:`RelayedSession.lease_key` of the server's session ``session_id`` on ``upstream``."""
    return "s" + hashlib.sha256(canonical([upstream, session_id]).encode()).hexdigest()


def decode_relayed_session(raw: bytes) -> RelayedSession | None:
    """An id's sealed values: three from before ids carried the client (still live when a gateway is upgraded)."""
    try:
        values = json.loads(raw)
    except (ValueError, TypeError):
        return None
    if not isinstance(values, list) or len(values) not in (3, 5) or not all(isinstance(v, str) for v in values):
        return None
    return RelayedSession(*values)


def relayed_client(params: object) -> tuple[str, str]:
    """The ``clientInfo`` name and version of a relayed ``initialize``'s params (each "" when not a string), to be
    sealed into its session's id."""
    info = params.get("clientInfo") if isinstance(params, Mapping) else None
    info = info if isinstance(info, Mapping) else {}
    name, version = (value if isinstance(value := info.get(key), str) else "" for key in ("name", "version"))
    return name[:_CLIENT_LABEL_MAX], version[:_CLIENT_LABEL_MAX]


def relay_upstream(has_session_id: bool, session: RelayedSession | None, principal: str, routed: str,
                   legacy: Collection[str]) -> str | None:
    """The 2025-era upstream a 2025 client's request is relayed to, or None (the gateway's own sessions decide).
    With a session id: the one its relayed session names, for the principal it was opened by only (another's, or
    an id not ours, goes to the gateway's own sessions, which know none: 404). Without: the upstream its peer
    routes to (``routed``), when that one is served in its 2025 era."""
    if has_session_id:
        if session is None or session.principal != principal or session.upstream not in legacy:
            return None
        return session.upstream
    return routed if routed in legacy else None


def check_claims(claims: Claims | None, expected: Claims, now_ms: int) -> ErrorValue | None:
    """A retry's state against the retry itself (``expected``: its principal, method, name and digest; ``call``
    and ``round`` of the parked call it names). Every mismatch is the same INVALID_PARAMS: nothing is told to a
    forger."""
    if claims is None:
        why = "it is not a state this gateway minted"
    elif claims.expires_ms < now_ms:
        why = "it has expired"
    elif (claims.principal, claims.method, claims.name, claims.digest) != (
            expected.principal, expected.method, expected.name, expected.digest):
        why = "it was minted for another request"
    elif (claims.call, claims.round) != (expected.call, expected.round):
        why = "it was already answered"
    else:
        return None
    return ErrorValue(E.INVALID_PARAMS, f"invalid requestState: {why}", {"requestState": "invalid"})


# --- one bridged call ------------------------------------------------------------------------------------
class Phase(Enum):
    RUNNING = "running"  # the legacy server works on the call
    WAITING = "waiting"  # its questions went to the client in input_required; the call is parked
    DONE = "done"


@dataclass(frozen=True, slots=True)
class Asked:
    key: str
    upstream_id: str | int
    method: str
    params: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class CallLimits:
    max_rounds: int = 10
    max_input_requests_per_round: int = 16


@dataclass(frozen=True, slots=True)
class CallState:
    method: str
    capabilities: Mapping[str, Any]  # the 2026 client's, of the request that started the call
    limits: CallLimits = CallLimits()
    phase: Phase = Phase.RUNNING
    round: int = 0
    asked_count: int = 0
    gathered: tuple[Asked, ...] = ()  # asked by the server, not yet sent to the client
    waiting: tuple[Asked, ...] = ()  # sent to the client, not yet answered
    final: tuple[Any, ErrorValue | None] | None = None  # the server answered while the client held a state
    log_level: str | None = None  # the driving request's ``_meta`` logLevel (each retry says its own)


# events
@dataclass(frozen=True, slots=True)
class ServerAsked:
    upstream_id: str | int
    method: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServerAnswered:
    result: Any = None
    error: Any = None


@dataclass(frozen=True, slots=True)
class ServerNotified:
    method: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Drained:
    """Nothing more from the legacy server for now: what it asked so far goes to the client as one round."""


@dataclass(frozen=True, slots=True)
class Retried:
    responses: Mapping[str, Any]
    log_level: str | None = None


@dataclass(frozen=True, slots=True)
class AnswerTimedOut:
    round: int


@dataclass(frozen=True, slots=True)
class ClientGone:
    """The client closed the request's stream: the 2026 cancel (2026-07-28 basic/patterns §Cancellation)."""


@dataclass(frozen=True, slots=True)
class UpstreamBroke:
    detail: str


Event = ServerAsked | ServerNotified | ServerAnswered | Drained | Retried | AnswerTimedOut | ClientGone | UpstreamBroke


# actions
@dataclass(frozen=True, slots=True)
class AnswerServer:
    upstream_id: str | int
    result: Any = None
    error: ErrorValue | None = None


@dataclass(frozen=True, slots=True)
class AskClient:
    requests: dict[str, Any]
    round: int


@dataclass(frozen=True, slots=True)
class Finish:
    result: Any = None
    error: ErrorValue | None = None


@dataclass(frozen=True, slots=True)
class CancelServer:
    reason: str


@dataclass(frozen=True, slots=True)
class Notify:
    """A request-scoped notification for the client, on the request's SSE answer (2026-07-28 basic/transports)."""

    message: dict[str, Any]


Action = AnswerServer | AskClient | Finish | CancelServer | Notify
Step = tuple[CallState, tuple[Action, ...]]


def missing_capability(method: str, params: Mapping[str, Any], caps: Mapping[str, Any]) -> dict[str, Any] | None:
    """The capability a server request needs that the client did not declare on this request (2026-07-28 basic/
    patterns §Multi Round-Trip Requests: never ask for one it did not declare), as ``requiredCapabilities``."""
    if method == "sampling/createMessage":
        sampling = caps.get("sampling")
        if not isinstance(sampling, Mapping):
            return {"sampling": {}}
        return {"sampling": {"tools": {}}} if params.get("tools") and "tools" not in sampling else None
    if method == "elicitation/create":
        elicitation = caps.get("elicitation")
        mode = "url" if params.get("mode") == "url" else "form"
        if isinstance(elicitation, Mapping) and (mode in elicitation or (mode == "form" and not elicitation)):
            return None
        return {"elicitation": {mode: {}}}
    return None if isinstance(caps.get("roots"), Mapping) else {"roots": {}}


def input_request(asked: Asked) -> dict[str, Any]:
    """A legacy server request as a 2026 input request: ``{method, params}`` without ``_meta``/``task`` (said in
    2025 terms) and, for a URL elicitation, without ``elicitationId`` (2026 removed it)."""
    drop = {"_meta", "task", "elicitationId"}
    return {"method": asked.method, "params": {k: v for k, v in asked.params.items() if k not in drop}}


def start(method: str, capabilities: Mapping[str, Any], limits: CallLimits = CallLimits(),
          log_level: str | None = None) -> CallState:
    return CallState(method, capabilities, limits, log_level=log_level)


def handle(state: CallState, event: Event) -> Step:
    if state.phase is Phase.DONE:
        return state, ()  # late messages of an ended call are ignored (2026-07-28 basic/patterns §Cancellation)
    match event:
        case ServerAsked():
            return _asked(state, event)
        case ServerNotified(method, params):
            return state, _notified(state, method, params)
        case ServerAnswered(result, error):
            return _answered(state, result, error)
        case Drained():
            return _drained(state)
        case Retried(responses, level):
            return _retried(replace(state, log_level=level), responses)
        case AnswerTimedOut(round=rnd):
            if state.phase is Phase.WAITING and rnd == state.round:
                return _done(state), (CancelServer("the client did not answer in time"),)
            return state, ()
        case ClientGone():
            if state.phase is Phase.RUNNING:
                return _done(state), (CancelServer("the client closed the request"),)
            return state, ()
        case UpstreamBroke(detail):
            return _done(state), (Finish(error=E.upstream_failure(E.UpstreamFault.SESSION, detail)),)
        case _:
            assert_never(event)


def _done(state: CallState) -> CallState:
    return replace(state, phase=Phase.DONE, gathered=(), waiting=())


def _asked(state: CallState, event: ServerAsked) -> Step:
    if event.method == "ping":  # 2025-11-25 basic/utilities/ping: answered promptly, nothing for the client
        return state, (AnswerServer(event.upstream_id, {}),)
    if event.method not in INPUT_REQUEST_METHODS:
        return state, (AnswerServer(event.upstream_id, error=ErrorValue(
            E.METHOD_NOT_FOUND, f"the gateway's client cannot answer {event.method}")),)
    if state.method not in MRTR_METHODS:  # only these may answer input_required (2026-07-28 §MRTR)
        return state, (AnswerServer(event.upstream_id, error=ErrorValue(
            E.INTERNAL_ERROR, f"the client cannot be asked during {state.method}")),)
    needed = missing_capability(event.method, event.params, state.capabilities)
    if needed is not None:
        error = ErrorValue(MISSING_REQUIRED_CLIENT_CAPABILITY, f"the server needs the client capability "
                           f"{next(iter(needed))!r} for {event.method}", {"requiredCapabilities": needed})
        return _done(state), (CancelServer("the client lacks a capability"), Finish(error=error))
    asked = Asked(f"in{state.asked_count + 1}", event.upstream_id, event.method, event.params)
    return replace(state, asked_count=state.asked_count + 1, gathered=(*state.gathered, asked)), ()


def _notified(state: CallState, method: str, params: Mapping[str, Any]) -> tuple[Action, ...]:
    """Progress reaches the client while its request is open (2026-07-28 basic/patterns §Progress); a log message
    only when that request set ``_meta`` logLevel, at or above it (2026-07-28 server/utilities/logging). A parked
    call has no open request: what it says meanwhile is dropped."""
    if state.phase is not Phase.RUNNING:
        return ()
    if method == "notifications/progress" or (method == LOG_MESSAGE and log_wanted(params.get("level"),
                                                                                     state.log_level)):
        return (Notify({"jsonrpc": "2.0", "method": method, "params": dict(params)}),)
    return ()


def for_request(message: Mapping[str, Any], token: object) -> Mapping[str, Any] | None:
    """A notification :class:`Notify` gave, as the driving request's stream carries it: progress under that
    request's token, anything else as it is."""
    return progress_for(message, token) if message.get("method") == "notifications/progress" else message


def progress_for(message: Mapping[str, Any], token: object) -> dict[str, Any] | None:
    """A legacy progress notification for the request driving the call now: the legacy call keeps the token of
    the request that started it, while each 2026 round is its own request with its own token (2026-07-28
    basic/patterns §Progress), so the token is the current request's; one that asked for none gets nothing."""
    params = message.get("params")
    if token is None or isinstance(token, bool) or not isinstance(params, Mapping):
        return None
    return {**message, "params": {**params, "progressToken": token}}


def _answered(state: CallState, result: object, error: object) -> Step:
    final = (None, modern_error(error)) if error is not None else (complete_result(state.method, result), None)
    if state.phase is Phase.WAITING:  # the client holds a state: its retry gets the answer
        return replace(state, final=final), ()
    return _done(state), (Finish(*final),)


def _drained(state: CallState) -> Step:
    if state.phase is not Phase.RUNNING or not state.gathered:
        return state, ()
    return _ask(state, state.gathered)


def _ask(state: CallState, asked: tuple[Asked, ...]) -> Step:
    limits = state.limits
    if state.round >= limits.max_rounds:
        error = E.limit_error("reverse.max_rounds", limits.max_rounds)
        return _done(state), (CancelServer("too many rounds"), Finish(error=error))
    if len(asked) > limits.max_input_requests_per_round:
        error = E.limit_error("reverse.max_input_requests_per_round", limits.max_input_requests_per_round)
        return _done(state), (CancelServer("too many input requests"), Finish(error=error))
    rnd = state.round + 1
    requests = {a.key: input_request(a) for a in asked}
    return replace(state, phase=Phase.WAITING, round=rnd, waiting=asked, gathered=()), (AskClient(requests, rnd),)


def _retried(state: CallState, responses: Mapping[str, Any]) -> Step:
    """Answers for the waiting keys go to the server; unknown keys are ignored; a missing (or non-object) answer
    is asked again in a new round (2026-07-28 basic/patterns §Multi Round-Trip Requests)."""
    if state.phase is not Phase.WAITING:
        return state, ()
    if state.final is not None:
        return _done(state), (Finish(*state.final),)
    answered = [a for a in state.waiting if isinstance(responses.get(a.key), Mapping)]
    missing = tuple(a for a in state.waiting if a not in answered)
    actions: list[Action] = [AnswerServer(a.upstream_id, dict(responses[a.key])) for a in answered]
    if missing:
        state, more = _ask(replace(state, phase=Phase.RUNNING), (*missing, *state.gathered))
        return state, (*actions, *more)
    return replace(state, phase=Phase.RUNNING, waiting=()), tuple(actions)
