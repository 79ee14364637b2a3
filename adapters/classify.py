"""Classify one HTTP request at the MCP endpoint into an accepted value or a rejection (2025-11-25
basic/transports §Streamable HTTP, §Session Management, §Security).

The shell passes a plain :class:`HttpView` plus the session record named by the ``Mcp-Session-Id`` header (or
None) and the current time; this module decides everything else. Order: Origin/Host (403) -> HTTP method (405)
-> Accept/Content-Type (406/415) -> JSON (400) -> era (a 2026 request bypasses sessions; its non-object
``_meta`` is 400) -> session (400/404) -> ``MCP-Protocol-Version`` (400).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final
from urllib.parse import urlsplit

from adapters.authz import Principal
from adapters.errors import Reason, Rejection, reject
from adapters.jsonwire import JsonArray, JsonObject, JsonValue, JsonView, TooDeep, loads, members
from adapters.protocol import (
    BATCH_VERSIONS,
    HANDSHAKE_VERSIONS,
    MAX_BATCH,
    MODERN_VERSION,
    PROTOCOL_VERSION_META_KEY,
    is_request_id,
)
from adapters.records import SessionRecord

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


# Headers that carry one value: a second one is ambiguous (which session, which version?), never merged.
SINGLE_HEADERS = ("mcp-session-id", "mcp-protocol-version", "last-event-id", "authorization", "content-type")


@dataclass(frozen=True, slots=True)
class HttpView:
    method: str
    headers: Mapping[str, str]  # looked up by lower-case names: a case-insensitive mapping, or lower-cased keys
    body: bytes = b""
    repeated: frozenset[str] = frozenset()  # names of SINGLE_HEADERS the request sent more than once
    # The Origin/Host were checked already, so the request skips that check: at the entry of one of this process's
    # own doors (its X-Gateway-Door carries the process's door key, adapters.doors), or before its token was.
    origin_checked: bool = False
    # The principal the shell verified the request's access token for ([gateway.auth], adapters.authz): the session
    # is bound to it instead of to the Authorization header.
    principal: str | None = None
    # Its verified claims (issuer, subject, client, scopes; never the token): what peers match on and what a tool's
    # scope is checked against (adapters.peers, adapters.tool_policy).
    grant: Principal | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    # DNS-rebinding protection (2025-11-25 basic/transports §Security): loopback names by default, configurable.
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    allowed_origins: tuple[str, ...] = ()  # extra origins, beyond loopback ones
    session_idle_ms: int = 3_600_000
    # sha256(bearer token) -> principal name, from the config's [[tokens]] (per-peer pins match on it).
    tokens: Mapping[str, str] = field(default_factory=dict)


class Kind(StrEnum):
    """What an accepted HTTP request is; the shell has one handler per kind."""

    INITIALIZE = "initialize"  # a legacy handshake (no session yet)
    REQUEST = "request"  # a legacy request on a session
    NOTIFICATION = "notification"
    RESPONSE = "response"  # the client's answer to a request the gateway sent it
    MODERN = "modern"  # a 2026-07-28 request: passed through, no session
    OPEN_STREAM = "open_stream"  # GET: the session's standalone stream
    RESUME = "resume"  # GET with Last-Event-ID
    DELETE = "delete"
    BATCH = "batch"  # a 2025-03-26 JSON-RPC batch: each element classified on its own


@dataclass(frozen=True, slots=True)
class Accepted:
    """An accepted request; for a batch, ``batch`` holds each element's own classification (an Accepted, or the
    Rejection it is answered with)."""

    kind: Kind
    principal: str
    message: JsonObject = field(default_factory=dict)
    session: SessionRecord | None = None
    last_event_id: str | None = None
    batch: tuple[Accepted | Rejection, ...] = ()
    grant: Principal | None = None  # HttpView.grant: the request's verified token claims


def principal_of(authorization: str | None, tokens: Mapping[str, str] | None = None) -> str:
    """The authenticated principal a session is bound to: the name the token table gives the bearer token,
    else a digest of the credential (never stored in clear), or ``anonymous``. An unknown credential is still
    verified by the upstream it is passed to; it just matches no named peer."""
    if not authorization:
        return "anonymous"
    scheme, _, token = authorization.partition(" ")
    if tokens and scheme.lower() == "bearer":
        named = tokens.get(hashlib.sha256(token.strip().encode("utf-8")).hexdigest())
        if named is not None:
            return named
    return "bearer:" + hashlib.sha256(authorization.encode("utf-8")).hexdigest()[:32]


def _has_utf8_form(value: str) -> bool:
    """False for a header value holding lone surrogates: how the HTTP server hands over bytes that are not UTF-8
    (``surrogateescape``)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _request_id(view: HttpView) -> JsonValue:
    """The id of a POSTed message, for a refusal decided before the body was read (None when there is none)."""
    if view.method != "POST":
        return None
    try:
        message = loads(view.body)
    except TooDeep as exc:  # parsed whole, then refused for its depth: its id can still be read
        message = exc.value
    except ValueError:
        return None
    return message.get("id") if isinstance(message, dict) else None


def request_id(view: HttpView) -> JsonValue:
    """The id of a POSTed message, or None: for a refusal the shell decides after classification (a store down)."""
    return _request_id(view)


def _host_name(value: str) -> str:
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def check_origin_host(headers: Mapping[str, str], policy: Policy) -> Rejection | None:
    host = headers.get("host")
    if host is not None and _host_name(host).lower() not in policy.allowed_hosts:
        return reject(Reason.BAD_HOST, f"Host {host!r} is not allowed")
    origin = headers.get("origin")
    if origin is None or origin in policy.allowed_origins:
        return None  # non-browser clients send no Origin
    name = urlsplit(origin).hostname or ""
    if name in LOOPBACK_HOSTS or f"[{name}]" in LOOPBACK_HOSTS:
        return None
    return reject(Reason.BAD_ORIGIN, f"Origin {origin!r} is not allowed")


def _accepts(headers: Mapping[str, str], *types: str) -> bool:
    accept = headers.get("accept", "")
    offered = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return all(t in offered or "*/*" in offered for t in types)


def parse_message(body: bytes) -> JsonObject | JsonArray | Rejection:
    """One JSON-RPC message, or a batch (a list, judged by :func:`_classify_batch`)."""
    try:
        message = loads(body)
    except TooDeep as exc:
        # Choice: INVALID_REQUEST, not PARSE_ERROR: the text is JSON, but no message the gateway takes nests this deep
        # (the one limit of adapters.jsonwire, so nothing read can be too deep to write back).
        ident = exc.value.get("id") if isinstance(exc.value, dict) else None
        return reject(Reason.INVALID_REQUEST, f"the message is nested more than {exc.limit} levels deep", ident)
    except (ValueError, UnicodeDecodeError):
        return reject(Reason.PARSE_ERROR, "the body is not valid JSON")
    return message if isinstance(message, list) else check_message(message)


def check_message(message: JsonValue) -> JsonObject | Rejection:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        # The id is echoed whenever it could be read (2025-11-25 basic §Responses: an error carries the request's
        # id), so a client matches the refusal to its request instead of waiting for it.
        return reject(Reason.INVALID_REQUEST, "expected one JSON-RPC 2.0 message",
                      message.get("id") if isinstance(message, dict) else None)
    if "params" in message and not isinstance(message["params"], dict):
        return reject(Reason.INVALID_REQUEST, "params must be an object", message.get("id"))
    return message


def message_kind(message: JsonView) -> Kind | None:
    has_id = "id" in message and is_request_id(message.get("id"))
    if isinstance(message.get("method"), str):
        return Kind.REQUEST if has_id else (Kind.NOTIFICATION if "id" not in message else None)
    if has_id and (("result" in message) != ("error" in message)):
        return Kind.RESPONSE
    return None


def is_modern(message: JsonView, headers: Mapping[str, str]) -> bool:
    """One URL serves both eras: 2026 header/``_meta`` or ``server/discover`` marks a modern request."""
    if headers.get("mcp-protocol-version") == MODERN_VERSION or message.get("method") == "server/discover":
        return True
    meta = members(message.get("params")).get("_meta")
    return isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta


def check_modern_meta(message: JsonView) -> Rejection | None:
    """A modern request's ``params._meta``, when sent, must be an object: else 400 INVALID_PARAMS with the request's id
    (2026-07-28 basic §Error Codes). Everything else in it is the upstream's to judge (the request passes through)."""
    params = members(message.get("params"))
    if "_meta" in params and not isinstance(params["_meta"], Mapping):
        return reject(Reason.INVALID_PARAMS, "params._meta must be an object", message.get("id"))
    return None


def session_expired(session: SessionRecord, now_ms: int, idle_ms: int) -> bool:
    """Idle for longer than the limit: its id answers 404 from now on, and its client can reach none of its work."""
    return now_ms - session.last_seen_ms > idle_ms


# How stale a session's last-seen time may be before a request writes it again: 1% of the idle limit, at most
# a second. Expiry is then up to that much early, and a burst of requests (or an MRTR round's answers) writes the
# store once instead of once per request (on a shared store, one round trip of each request's two).
TOUCH_EVERY_MS_MAX: Final = 1000


def touch_due(session: SessionRecord, now_ms: int, idle_ms: int) -> bool:
    """Whether a request at ``now_ms`` should write the session's last-seen time."""
    return now_ms - session.last_seen_ms >= min(TOUCH_EVERY_MS_MAX, idle_ms // 100)


_LONG_LIVED: Final = frozenset({Kind.OPEN_STREAM, Kind.RESUME})  # answers open for as long as their session


def kept_while_answering(verdict: Accepted) -> Accepted:
    """What the handler keeps of its verdict while the answer is open (for accounting once it ends): for a GET
    stream, open for the session's life, the session's identity only, not its parsed record (capabilities,
    client info, pins: held by every idle session's stream, that was about 3.4 KiB of the ~25 an idle session
    costs, docs/benchmarks.md); anything else as it is."""
    if verdict.kind not in _LONG_LIVED or verdict.session is None:
        return verdict
    return replace(verdict, session=verdict.session.identity())


def stands_on_held_record(verdict: Accepted | Rejection) -> bool:
    """Whether a verdict reached on a session record the shell already holds (the record a round waiting for this
    session's client was accepted with) stands without reading the stored one
    (docs/design/takeover.md#a-clients-answer-is-checked-on-its-requests-session-record): only an accepted client
    answer. What accepts it — the session's principal and negotiated version — is fixed for the session's life, and a
    held record's last-seen time is never newer than the store's, so it refuses for expiry whatever the stored one
    would (and more: that refusal, like every other verdict, is reached again on the stored record)."""
    return isinstance(verdict, Accepted) and verdict.kind is Kind.RESPONSE


def check_session(view: HttpView, session: SessionRecord | None, principal: str,
                  policy: Policy, now_ms: int, ident: JsonValue = None) -> Rejection | None:
    """The session checks, refusing with ``ident`` (the request's id, when a body was read)."""
    if "mcp-session-id" not in view.headers:
        return reject(Reason.MISSING_SESSION, "Mcp-Session-Id header is required", ident)
    # Another principal's session is reported exactly like an unknown one: 404, nothing leaked.
    if session is None or session.principal != principal or session_expired(session, now_ms, policy.session_idle_ms):
        return reject(Reason.UNKNOWN_SESSION, "session not found", ident)
    version = view.headers.get("mcp-protocol-version")
    if version is not None and (version not in HANDSHAKE_VERSIONS or version != session.protocol_version):
        return reject(Reason.BAD_PROTOCOL_VERSION, f"unsupported MCP-Protocol-Version {version!r}", ident)
    return None


def classify(view: HttpView, session: SessionRecord | None, policy: Policy, now_ms: int) -> Accepted | Rejection:
    """The request's verdict; an accepted one (and each batch element) carries the request's verified claims
    (``view.grant``), set where it is built rather than copied on afterwards: every request pays this path."""
    return _classify(view, session, policy, now_ms)


def _classify(view: HttpView, session: SessionRecord | None, policy: Policy, now_ms: int) -> Accepted | Rejection:
    refused = (None if view.origin_checked else check_origin_host(view.headers, policy)) or _check_repeated(view)
    if refused is not None:
        return refused
    authorization = view.headers.get("authorization")
    if authorization is not None and not _has_utf8_form(authorization):
        # The session's principal is a digest of these bytes, and they would be forwarded upstream: refused here
        # rather than failing either way later.
        return reject(Reason.BAD_HEADER, "the Authorization header is not UTF-8 text", _request_id(view))
    principal = view.principal if view.principal is not None else principal_of(authorization, policy.tokens)
    if view.method == "POST":
        return _classify_post(view, session, policy, now_ms, principal)
    if view.method not in ("GET", "DELETE"):
        return reject(Reason.METHOD_NOT_ALLOWED, f"{view.method} is not supported at the MCP endpoint")
    if view.method == "GET" and not _accepts(view.headers, "text/event-stream"):
        return reject(Reason.NOT_ACCEPTABLE, "GET must accept text/event-stream")
    refused = check_session(view, session, principal, policy, now_ms)
    if refused is not None:
        return refused
    if view.method == "DELETE":
        return Accepted(Kind.DELETE, principal, session=session, grant=view.grant)
    last = view.headers.get("last-event-id")
    return Accepted(Kind.RESUME if last else Kind.OPEN_STREAM, principal, session=session, last_event_id=last,
                    grant=view.grant)


def _check_repeated(view: HttpView) -> Rejection | None:
    """Two ``Mcp-Session-Id`` (or version, resume position, credential, media type) values: the request is
    ambiguous, so it is refused rather than read by one of them (HTTP: a field that is not a list appears once)."""
    if not view.repeated:
        return None
    names = ", ".join(sorted(view.repeated))
    return reject(Reason.INVALID_REQUEST, f"header sent more than once: {names}", _request_id(view))


def _classify_post(view: HttpView, session: SessionRecord | None, policy: Policy, now_ms: int,
                   principal: str) -> Accepted | Rejection:
    if not _accepts(view.headers, "application/json", "text/event-stream"):
        return reject(Reason.NOT_ACCEPTABLE, "POST must accept application/json and text/event-stream")
    if view.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        return reject(Reason.UNSUPPORTED_MEDIA_TYPE, "Content-Type must be application/json")
    message = parse_message(view.body)
    if isinstance(message, Rejection):
        return message
    if isinstance(message, list):
        return _classify_batch(view, session, policy, now_ms, principal, message)
    kind = message_kind(message)
    if kind is None:
        return reject(Reason.INVALID_REQUEST, "not a JSON-RPC request, notification or response", message.get("id"))
    if kind is not Kind.RESPONSE and is_modern(message, view.headers):
        return check_modern_meta(message) or Accepted(Kind.MODERN, principal, message, grant=view.grant)
    if kind is Kind.REQUEST and message["method"] == "initialize":
        return Accepted(Kind.INITIALIZE, principal, message, grant=view.grant)
    refused = check_session(view, session, principal, policy, now_ms, message.get("id"))
    return refused or Accepted(kind, principal, message, session, grant=view.grant)


def _classify_batch(view: HttpView, session: SessionRecord | None, policy: Policy, now_ms: int, principal: str,
                    items: JsonArray) -> Accepted | Rejection:
    """A JSON-RPC batch (2025-03-26 basic §Batching, transports §Sending Messages): accepted only on a session that
    negotiated 2025-03-26 (later revisions removed batching, and ``initialize`` may not be batched, so a batch
    without a session is refused too). The HTTP request's checks apply once; each element is then judged alone
    and a bad one becomes its own error response (JSON-RPC 2.0 §6), not a refusal of the whole batch."""
    only_old = "JSON-RPC batches are only accepted on 2025-03-26 sessions (batching was removed in 2025-06-18)"
    if "mcp-session-id" not in view.headers:
        return reject(Reason.INVALID_REQUEST, only_old)
    refused = check_session(view, session, principal, policy, now_ms)
    if refused is not None:
        return refused
    assert session is not None
    if session.protocol_version not in BATCH_VERSIONS:
        return reject(Reason.INVALID_REQUEST, only_old)
    if not items:
        return reject(Reason.INVALID_REQUEST, "an empty JSON-RPC batch")
    if len(items) > MAX_BATCH:
        return reject(Reason.INVALID_REQUEST, f"a JSON-RPC batch of {len(items)} messages (the gateway takes "
                                         f"at most {MAX_BATCH})")
    elements = tuple(_batch_element(i, principal, session, view.grant) for i in items)
    return Accepted(Kind.BATCH, principal, session=session, batch=elements, grant=view.grant)


def _batch_element(item: JsonValue, principal: str, session: SessionRecord,
                   grant: Principal | None) -> Accepted | Rejection:
    message = check_message(item)
    if isinstance(message, Rejection):
        return message
    kind, ident = message_kind(message), message.get("id")
    if kind is None:
        return reject(Reason.INVALID_REQUEST, "not a JSON-RPC request, notification or response", ident)
    if kind is Kind.REQUEST and message["method"] == "initialize":
        return reject(Reason.INVALID_REQUEST, "initialize must not be part of a JSON-RPC batch", ident)
    if kind is not Kind.RESPONSE and is_modern(message, {}):
        return reject(Reason.INVALID_REQUEST, "a 2026-07-28 request cannot be part of a session's batch", ident)
    return Accepted(kind, principal, message, session, grant=grant)


def batch_status(batch: tuple[Accepted | Rejection, ...], answers: int) -> int:
    """The HTTP status of a batch answered as JSON (no element streamed): 202 when nothing is answered
    (notifications and client responses alone), 200 when a request was among the elements, 400 when only bad
    elements were answered (2025-03-26 basic/transports §Sending Messages: input that holds no request and is
    not accepted gets an HTTP error status)."""
    if not answers:
        return 202
    asked = any(isinstance(e, Accepted) and e.kind is Kind.REQUEST for e in batch)
    return 200 if asked else 400
