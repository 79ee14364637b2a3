"""Translation-trace records: what one JSON Lines record of ``serve --trace`` holds, and how it is redacted.

Pure: the shell (``gateway.telemetry.trace``) passes the message, where it was seen and the clock; this module
decides the record. Content is redacted by default — tool arguments, completion arguments and context,
sampling and elicitation content (a URL elicitation's ``url`` included), the client's reasons for refusing them,
results, ``requestState`` and Authorization values become ``{"len": n, "sha256": "<first 12 hex>"}``, enough to
tell two values apart without showing either. Opaque values (``requestState``, cursors, progress tokens) are digested or
copied, never parsed or re-encoded (2026-07-28 basic/patterns §Multi Round-Trip Requests: the state is the
server's own).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

from adapters.jsonwire import JsonObject, JsonValue, dumps


class TapKind(StrEnum):
    """What the gateway's tap is called with. The first two are the tap's original kinds (a ``StrEnum``, so
    an older tap comparing with ``"upstream"`` still works); the others reach only a tap that asks for them
    (:func:`every_kind`)."""

    UPSTREAM = "upstream"  # a request body sent upstream
    DOWNSTREAM = "downstream"  # a message written to the legacy client (stream or JSON)
    CLIENT = "client"  # a message the legacy client POSTed
    ANSWER = "answer"  # a message the upstream sent back (its response or a notification)
    FAILED = "failed"  # the upstream hop failed without a JSON-RPC answer (the error the request gets)


class Direction(StrEnum):
    CLIENT_IN = "client->gateway"
    CLIENT_OUT = "gateway->client"
    UPSTREAM_OUT = "gateway->upstream"
    UPSTREAM_IN = "upstream->gateway"


DIRECTIONS = {TapKind.CLIENT: Direction.CLIENT_IN, TapKind.DOWNSTREAM: Direction.CLIENT_OUT,
              TapKind.UPSTREAM: Direction.UPSTREAM_OUT, TapKind.ANSWER: Direction.UPSTREAM_IN,
              TapKind.FAILED: Direction.UPSTREAM_IN}

# Params that carry content (2025-11-25 client/sampling, client/elicitation — a URL-mode request's ``url`` too,
# which may carry a one-time code —, server/tools, server/utilities/completion — the ``argument`` being typed
# and the ``context`` arguments already given —; 2026-07-28 basic/patterns §Multi Round-Trip Requests) or a
# credential.
CONTENT_PARAMS = frozenset({"arguments", "requestState", "inputResponses", "messages", "systemPrompt", "message",
                            "requestedSchema", "data", "authorization", "Authorization", "url", "argument",
                            "context"})
# The members of an error that are content; for an error in the legacy client's words (:func:`client_words`)
# its ``message`` too.
CONTENT_ERROR = frozenset({"data"})
CLIENT_ERROR = frozenset({"data", "message"})


def every_kind(tap: object) -> bool:
    """Whether ``tap`` asked for the extra kinds (a trace sets ``every_kind = True``): a tap written for the two
    original kinds would misfile the others."""
    return getattr(tap, "every_kind", False) is True


def digest(value: JsonValue) -> JsonObject:
    """A value's length and hash: a string's own UTF-8 bytes (an opaque value is hashed as received), anything
    else its compact JSON."""
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else dumps(value)
    return {"len": len(raw), "sha256": hashlib.sha256(raw).hexdigest()[:12]}


def client_words(kind: TapKind, error: JsonValue) -> bool:
    """Whether an error's ``message`` is the legacy client's own text: its error answer to a request of the
    gateway's (refusing sampling, elicitation or roots: 2025-11-25 client/sampling §Error Handling), or the
    gateway's error that quotes one (``adapters.errors.client_refused_error``, recognised by its
    ``data.clientError``). A user's reason for refusing is content like the request it refuses."""
    if not isinstance(error, dict):
        return False
    data = error.get("data")
    return kind is TapKind.CLIENT or (isinstance(data, dict) and "clientError" in data)


def redact(message: JsonValue, *, client_error: bool = False) -> JsonValue:
    """``message`` with its content digested; ids, methods, names, error codes and ``_meta`` kept (an error's
    message too, unless ``client_error``: :func:`client_words`)."""
    if not isinstance(message, dict):
        return digest(message)
    out: JsonObject = {}
    error_content = CLIENT_ERROR if client_error else CONTENT_ERROR
    for key, value in message.items():
        if key == "result":
            out[key] = digest(value)
        elif key == "params" and isinstance(value, dict):
            out[key] = {k: digest(v) if k in CONTENT_PARAMS else v for k, v in value.items()}
        elif key == "error" and isinstance(value, dict):
            out[key] = {k: digest(v) if k in error_content else v for k, v in value.items()}
        else:
            out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class Seen:
    """Where a message was seen: the legacy session, the legacy request it belongs to (None: the message's
    own id), the bridge round, and the monotonic time in ms."""

    session: str | None
    request: JsonValue
    round: int | None
    t_ms: float


def correlation(session: str | None, request: JsonValue) -> str:
    """The key every record of one legacy request shares: its session and its downstream id."""
    return f"{session or '-'}/{dumps(request).decode() if request is not None else '-'}"


def trace_record(kind: TapKind, message: JsonValue, seen: Seen, *, content: bool) -> JsonObject:
    """One JSON Lines record for ``message`` (a JSON-RPC message; for :attr:`TapKind.FAILED`, the error)."""
    failed = kind is TapKind.FAILED
    msg: JsonObject = message if isinstance(message, dict) else {}
    error = message if failed else msg.get("error")
    request = seen.request if seen.request is not None else msg.get("id")
    record: JsonObject = {
        "t_ms": round(seen.t_ms, 3), "corr": correlation(seen.session, request), "session": seen.session,
        "round": seen.round, "dir": DIRECTIONS[kind].value, "method": msg.get("method"), "id": msg.get("id"),
    }
    quoted = not content and not failed and client_words(kind, error)
    if isinstance(error, dict):
        text = error.get("message")
        told: JsonObject = {"code": error.get("code"), "message": digest(text) if quoted else text}
        if failed and "data" in error:  # the gateway's own cause (data.upstream "timeout", ...): not content
            told["data"] = error["data"]
        record["error"] = told
    result = msg.get("result")
    if isinstance(result, dict) and isinstance(result.get("resultType"), str):
        record["resultType"] = result["resultType"]  # a kind, not content: shows the MRTR rounds
    if isinstance(result, dict) and result.get("isError") is True:
        record["isError"] = True  # a tool's own failure (2025-11-25 server/tools §Error Handling)
    if not failed:
        record["message"] = message if content else redact(message, client_error=quoted)
    return record
