"""Error values, the upstream -> legacy error rules, and the ONE status table (2026-07-28 basic §Error Codes).

Design (docs/design/errors.md#json-rpc-errors-are-never-http-statuses-on-the-legacy-side): JSON-RPC errors for a
legacy request always travel in a normal response (HTTP 200 JSON or an SSE event); an upstream HTTP 400/404 is never
relayed as an HTTP status because a 2025 client reads 404 as "session gone" and 400 as "bad session/version header".
HTTP statuses are only used for transport-level rejections of the legacy request itself, and those are all listed in
:data:`REJECTIONS`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from mcp_types.jsonrpc import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    URL_ELICITATION_REQUIRED,
)

from adapters.jsonwire import JsonObject, JsonValue, JsonView
from adapters.protocol import is_request_id

RESOURCE_NOT_FOUND_2025: Final = -32002  # retired in 2026, still meaningful to 2025 clients (2026 §Error Codes)
# Implementation-defined band (-32000..-32019) is where 2025 puts server errors; our limits live there so a
# 2025 client never mistakes them for a spec-defined code (2026-07-28 basic §Error Codes).
GATEWAY_LIMIT_EXCEEDED: Final = -32000
UPSTREAM_FAILURE: Final = INTERNAL_ERROR

__all__ = [
    "GATEWAY_LIMIT_EXCEEDED",
    "HEADER_MISMATCH",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "MISSING_REQUIRED_CLIENT_CAPABILITY",
    "PARSE_ERROR",
    "REJECTIONS",
    "RESOURCE_NOT_FOUND_2025",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "URL_ELICITATION_REQUIRED",
    "AuthChallenge",
    "ErrorValue",
    "Reason",
    "Rejection",
    "UpstreamFault",
    "answer_not_taken",
    "client_refused_error",
    "limit_error",
    "limit_rejection",
    "missing_capability_error",
    "passthrough_ended",
    "refusal",
    "reject",
    "reserved_2026",
    "store_unavailable",
    "token_refused",
    "translate_upstream_error",
    "upstream_failure",
]


@dataclass(frozen=True, slots=True)
class AuthChallenge:
    """An upstream's refusal of the client's own token: the :data:`REJECTIONS` reason (its HTTP status) and the
    upstream's ``WWW-Authenticate`` challenges, each unchanged and in order (2025-11-25 basic/authorization §Error
    Handling; a server may offer several schemes, e.g. Bearer and DPoP, one header each)."""

    reason: Reason
    challenges: tuple[str, ...] = ()

    def answer(self) -> tuple[int, tuple[tuple[str, str], ...]]:
        """The HTTP status and headers (one ``WWW-Authenticate`` per challenge: a challenge may hold commas, so
        they are never joined into one value) a legacy answer carrying this refusal has, where it can."""
        return REJECTIONS[self.reason][0], tuple(("WWW-Authenticate", value) for value in self.challenges)


@dataclass(frozen=True, slots=True)
class ErrorValue:
    """One JSON-RPC error object; ``log`` is an operator note the shell logs (never sent); ``challenge`` marks an
    upstream's refusal of the client's own token, which the shell answers with its HTTP status (never sent)."""

    code: int
    message: str
    data: JsonValue = None
    log: str | None = field(default=None, compare=False)
    challenge: AuthChallenge | None = field(default=None, compare=False)

    def to_wire(self) -> JsonObject:
        out: JsonObject = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


@dataclass(frozen=True, slots=True)
class Rejection:
    """A transport-level refusal of an HTTP request (legacy, or a malformed modern one): an HTTP status plus a
    JSON-RPC error body."""

    reason: Reason
    status: int
    error: ErrorValue
    ident: JsonValue = None  # the request's id when it is known (2026-07-28 basic §Error Codes: every error carries it)

    def body(self) -> JsonObject:
        return {"jsonrpc": "2.0", "id": self.ident, "error": self.error.to_wire()}


class Reason(StrEnum):
    """Why the gateway refused an HTTP request at the transport: the key of :data:`REJECTIONS`, and the name
    telemetry and logs give the refusal."""

    BAD_ORIGIN = "bad_origin"
    BAD_HOST = "bad_host"
    NOT_ACCEPTABLE = "not_acceptable"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    PARSE_ERROR = "parse_error"
    INVALID_REQUEST = "invalid_request"
    MISSING_SESSION = "missing_session"
    BAD_PROTOCOL_VERSION = "bad_protocol_version"
    UNKNOWN_SESSION = "unknown_session"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    INVALID_PARAMS = "invalid_params"
    BAD_HEADER = "bad_header"
    UPSTREAM_UNAUTHORIZED = "upstream_unauthorized"
    UPSTREAM_FORBIDDEN = "upstream_forbidden"
    UNAUTHORIZED = "unauthorized"
    INSUFFICIENT_SCOPE = "insufficient_scope"
    AUTHORIZATION_UNAVAILABLE = "authorization_unavailable"
    BODY_TOO_LARGE = "body_too_large"
    BODY_TIMEOUT = "body_timeout"
    SESSION_LIMIT = "session_limit"
    PINNED_TO_LEGACY = "pinned_to_legacy"
    PASSTHROUGH_FAILED = "passthrough_failed"
    PASSTHROUGH_ENDED = "passthrough_ended"
    STORE_UNAVAILABLE = "store_unavailable"
    ANSWER_NOT_TAKEN = "answer_not_taken"


class UpstreamFault(StrEnum):
    """What went wrong with the upstream hop: ``data.upstream`` of the error the client gets, which telemetry
    counts and retries read (never the message text)."""

    BUSY = "busy"
    CREDENTIAL = "credential"
    HTTP_5XX = "http_5xx"
    HTTP_STATUS = "http_status"
    INITIALIZE = "initialize"
    INVALID_RESPONSE = "invalid_response"
    INVALID_RESULT = "invalid_result"
    NON_JSON = "non_json"
    SESSION = "session"
    STREAM_BROKEN = "stream_broken"
    TIMEOUT = "timeout"
    TOO_LARGE = "too_large"
    UNAUTHORIZED = "unauthorized"
    UNREACHABLE = "unreachable"
    UNSUPPORTED_VERSION = "unsupported_version"
    # The upstream answered -32020/-32022 to the gateway's own request: the gateway got the wire wrong.
    REFUSED_GATEWAY = "refused_gateway"
    # A retired or undefined spec-reserved code from a 2026 server.
    INVALID_CODE = "invalid_code"


# THE table: every HTTP status the legacy endpoint ever sends for a refusal, with its JSON-RPC code.
# 2025-11-25 basic/transports: bad Origin 403; missing session 400; unknown/terminated session 404; bad
# MCP-Protocol-Version 400; POST must accept both types (406); body must be JSON (415/400).
REJECTIONS: Final[Mapping[Reason, tuple[int, int]]] = {
    Reason.BAD_ORIGIN: (403, INVALID_REQUEST),
    Reason.BAD_HOST: (403, INVALID_REQUEST),
    Reason.NOT_ACCEPTABLE: (406, INVALID_REQUEST),
    Reason.UNSUPPORTED_MEDIA_TYPE: (415, INVALID_REQUEST),
    Reason.PARSE_ERROR: (400, PARSE_ERROR),
    Reason.INVALID_REQUEST: (400, INVALID_REQUEST),
    Reason.MISSING_SESSION: (400, INVALID_REQUEST),
    Reason.BAD_PROTOCOL_VERSION: (400, INVALID_REQUEST),
    Reason.UNKNOWN_SESSION: (404, INVALID_REQUEST),
    Reason.METHOD_NOT_ALLOWED: (405, INVALID_REQUEST),
    # A modern (2026) request whose _meta the gateway must read is malformed: 400 -32602 (2026-07-28 basic
    # §Error Codes).
    Reason.INVALID_PARAMS: (400, INVALID_PARAMS),
    # A header value with no UTF-8 form (raw bytes such as 0xff): -32602, as for a tool name or argument that cannot
    # become a header (docs/design/upstream.md#mcp-param--headers); 400 because the HTTP request itself is malformed.
    Reason.BAD_HEADER: (400, INVALID_PARAMS),
    # The upstream refused the client's own (forwarded) token: the status tells the client to authorize again
    # (401) or step up its scopes (403), as the upstream itself would have (2025-11-25 basic/authorization).
    Reason.UPSTREAM_UNAUTHORIZED: (401, UPSTREAM_FAILURE),
    Reason.UPSTREAM_FORBIDDEN: (403, UPSTREAM_FAILURE),
    # The gateway's own check of the client's access token (adapters.authz; 2025-11-25 basic/authorization "Error
    # Handling"): no or a bad token 401, too few scopes 403 (step up), its keys or introspection unreachable 503.
    # Each carries the gateway's own WWW-Authenticate challenge; data.authorization names the cause.
    Reason.UNAUTHORIZED: (401, INVALID_REQUEST),
    Reason.INSUFFICIENT_SCOPE: (403, INVALID_REQUEST),
    Reason.AUTHORIZATION_UNAVAILABLE: (503, INTERNAL_ERROR),
    # Transport bounds on the request itself (README §Limits and failure behaviour): the body is larger than
    # max_request_bytes, or did not arrive within request_body_timeout_seconds. Its id is unknown: the body was
    # never parsed.
    Reason.BODY_TOO_LARGE: (413, INVALID_REQUEST),
    Reason.BODY_TIMEOUT: (408, INVALID_REQUEST),
    # A session bound (max_sessions, max_sessions_per_principal) is full: capacity, not the client's fault.
    Reason.SESSION_LIMIT: (503, GATEWAY_LIMIT_EXCEEDED),
    # A 2026-07-28 request the gateway passes through: a peer pinned to legacy revisions is steered to
    # initialize (-32022, adapters.peers.admit_modern); the upstream hop failed (502: the gateway is the
    # client of a bad gateway); the gateway ended it before the upstream answered (shutdown: 503).
    Reason.PINNED_TO_LEGACY: (400, UNSUPPORTED_PROTOCOL_VERSION),
    Reason.PASSTHROUGH_FAILED: (502, UPSTREAM_FAILURE),
    Reason.PASSTHROUGH_ENDED: (503, INTERNAL_ERROR),
    # The session store (a shared Redis) failed or timed out: a dependency, not the client; 503 says retry
    # later (RFC 9110 §15.6.4), and -32603 with data.store "unavailable" names what failed.
    Reason.STORE_UNAVAILABLE: (503, INTERNAL_ERROR),
    # A client's answer reached its round as the round was handed over to another replica (shutdown,
    # docs/design/takeover.md#sigterm-hands-the-rounds-over), before it was acted on, or reached a replica
    # shutting down that would have had to take the round on:
    # 503 says send it again (the round goes on elsewhere), not "accepted".
    Reason.ANSWER_NOT_TAKEN: (503, INTERNAL_ERROR),
}


def refusal(reason: Reason, error: ErrorValue, ident: object = None) -> Rejection:
    """``error`` (built elsewhere, with its own code and data) answered with ``reason``'s HTTP status."""
    return Rejection(reason, REJECTIONS[reason][0], error, ident if is_request_id(ident) else None)


def reject(reason: Reason, message: str, ident: object = None) -> Rejection:
    """The refusal for ``reason``, answered to ``ident`` only when that is a valid id: an id of another type (an
    array, an object, a bool) cannot be echoed, so the answer's id is null (JSON-RPC 2.0 §5: unknown id)."""
    status, code = REJECTIONS[reason]
    return Rejection(reason, status, ErrorValue(code, message), ident if is_request_id(ident) else None)


# Codes a 2026 server emits because *the gateway* got the wire wrong: a bug or misconfiguration, not the
# client's fault (docs/design/errors.md#error-mapping).
_GATEWAY_FAULT_CODES: Final = frozenset({HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION})
# What a client sees for an upstream -32020/-32022 (decision 4); named so ``kit.check`` can recognise it.
GATEWAY_FAULT_MESSAGE: Final = "the gateway could not talk to the upstream server"


def reserved_2026(code: int) -> bool:
    """A code in the band 2026-07-28 reserves for the protocol (basic §Error Codes), defined there or not."""
    return -32099 <= code <= HEADER_MISMATCH


def translate_upstream_error(error: JsonView) -> ErrorValue:
    """Map an upstream JSON-RPC error object to the one the legacy client receives."""
    code, message, data = error.get("code"), error.get("message"), error.get("data")
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str):
        return upstream_failure(UpstreamFault.INVALID_RESPONSE, "the upstream sent a malformed error object")
    if code in _GATEWAY_FAULT_CODES:
        return ErrorValue(INTERNAL_ERROR, GATEWAY_FAULT_MESSAGE, {"upstream": UpstreamFault.REFUSED_GATEWAY.value},
                          log=f"upstream rejected the gateway's request: {code} {message}")
    if code == URL_ELICITATION_REQUIRED or (-32099 <= code <= -32023):
        # Retired (-32042) or undefined spec-reserved codes must not come from a 2026 server (2026-07-28 basic
        # §Error Codes).
        return ErrorValue(INTERNAL_ERROR, "the upstream server sent an invalid error code",
                          {"upstream": UpstreamFault.INVALID_CODE.value},
                          log=f"upstream emitted retired/undefined code {code}: {message}")
    # -32021 passes down unchanged: the client really lacks the capability. -32602 for a missing resource
    # stays -32602 (it is ambiguous; rewriting it to -32002 could lie), and -32002 itself is understood.
    return ErrorValue(code, message, data)


def token_refused(status: int, challenges: tuple[str, ...], upstream_error: JsonView | None,
                  forwarded: bool) -> ErrorValue:
    """An upstream HTTP 401/403. With the client's own token forwarded (a shared audience,
    docs/design/authorization.md#principal-and-token-passthrough) it is the client's to act on: the upstream's
    JSON-RPC error if it sent one (translated), else a -32603 naming the status and challenge, marked with an
    :class:`AuthChallenge` so the shell answers with the status and the upstream's ``WWW-Authenticate`` wherever the
    legacy transport still allows a status. With the gateway's own credential (or none) it is an operator problem: a
    plain upstream failure, and nothing of the upstream's challenge reaches the client, whose token was never shown
    to that upstream."""
    if not forwarded:
        return upstream_failure(UpstreamFault.UNAUTHORIZED,
                                f"HTTP {status}: the upstream refused the gateway's credential")
    reason = Reason.UPSTREAM_UNAUTHORIZED if status == 401 else Reason.UPSTREAM_FORBIDDEN
    if upstream_error is not None:
        error = translate_upstream_error(upstream_error)
    else:
        data: JsonObject = {"upstream": "unauthorized", "upstreamStatus": status}
        if challenges:
            # One challenge stays a string, as it always was (clients read it so); several are a list, in order.
            data["wwwAuthenticate"] = challenges[0] if len(challenges) == 1 else [*challenges]
        error = ErrorValue(REJECTIONS[reason][1], f"the upstream server refused the client's credentials "
                                                  f"(HTTP {status})", data)
    return ErrorValue(error.code, error.message, error.data, error.log, AuthChallenge(reason, challenges))


def limit_error(limit: str, value: JsonValue) -> ErrorValue:
    """A bridge limit was exceeded; the message names the limit and its configured value."""
    return ErrorValue(GATEWAY_LIMIT_EXCEEDED, f"gateway limit {limit} ({value}) exceeded",
                      {"limit": limit, "value": value})


def limit_rejection(limit: str, value: JsonValue, ident: JsonValue = None) -> Rejection:
    """A session bound is full: HTTP 503 whose JSON-RPC error names the limit, like :func:`limit_error`."""
    status, _code = REJECTIONS[Reason.SESSION_LIMIT]
    return Rejection(Reason.SESSION_LIMIT, status, limit_error(limit, value), ident)


def store_unavailable(ident: object = None) -> Rejection:
    """The session store failed: HTTP 503, -32603 with ``data.store = "unavailable"``, answered to ``ident``."""
    status, code = REJECTIONS[Reason.STORE_UNAVAILABLE]
    return Rejection(Reason.STORE_UNAVAILABLE, status, ErrorValue(code, "the gateway's session store is unavailable",
                                                             {"store": "unavailable"}),
                     ident if is_request_id(ident) else None)


def answer_not_taken(ident: object = None) -> Rejection:
    """A client's answer (or cancel, or stream resumption) its round was handed over before taking, or that a
    replica shutting down would have had to take the round on for: HTTP 503, -32603 with ``data.gateway =
    "handed_over"``; the client sends it again, and it reaches the round where it goes on."""
    status, code = REJECTIONS[Reason.ANSWER_NOT_TAKEN]
    return Rejection(Reason.ANSWER_NOT_TAKEN, status, ErrorValue(
        code, "the round was handed over to another replica before this message was taken: send it again",
        {"gateway": "handed_over"}), ident if is_request_id(ident) else None)


def shutting_down() -> ErrorValue:
    """A request in flight when the gateway stops: answered, so the client stops waiting for it."""
    return ErrorValue(INTERNAL_ERROR, "gateway shutting down", {"gateway": "shutting_down"})


def passthrough_ended() -> ErrorValue:
    """A modern passthrough the gateway ended (shutdown, or the client hung up) before the upstream answered."""
    return ErrorValue(INTERNAL_ERROR, "the gateway ended the request before the upstream answered")


def upstream_failure(kind: UpstreamFault, detail: str) -> ErrorValue:
    """Upstream refused/timeout/5xx/non-JSON/schema-breaking -> an error on the original request."""
    return ErrorValue(UPSTREAM_FAILURE, f"upstream failure ({kind}): {detail}", {"upstream": kind.value},
                      log=f"upstream {kind}: {detail}")


def missing_capability_error(capability: str, required: JsonView, method: str) -> ErrorValue:
    # Same code the upstream would use (-32021) so both paths read alike downstream.
    return ErrorValue(MISSING_REQUIRED_CLIENT_CAPABILITY,
                      f"the server needs the client capability '{capability}' for {method}, "
                      "which this client did not declare at initialize",
                      {"requiredCapabilities": dict(required)})


def client_refused_error(key: str, method: str, error: JsonView) -> ErrorValue:
    """The client answered a gateway request with an error: end the bridge with that error, explained."""
    code = error.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR
    text = error.get("message") if isinstance(error.get("message"), str) else "no message"
    return ErrorValue(code, f"the client refused {method} (input '{key}'): {text}",
                      {"inputKey": key, "clientError": dict(error)})
