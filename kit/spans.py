"""What the OpenTelemetry spans of a legacy request say: their names, their attributes, and how one bridge action
batch opens and closes the child spans of upstream rounds and of live requests to the client.

Pure: the shell (``gateway.telemetry.otel``) owns the tracer, the clock and the span objects; this module decides
from plain values. Attribute names follow the OpenTelemetry MCP semantic conventions where they have one
(``mcp.method.name``, ``mcp.protocol.version``, ``gen_ai.tool.name``, ``rpc.jsonrpc.error_code``); the gateway's own
are under ``mcp_gateway.``. Content (arguments, input request params) is only added when the trace keeps content
(``[gateway.trace] content`` or the peer's): ids, methods, names, kinds and counts are not content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from adapters import bridge as B
from adapters.jsonwire import dumps
from adapters.records import PendingRound
from adapters.usage import input_kind

AttrValue = str | bool | int | float | Sequence[str]


class RequestKind(StrEnum):
    """How the gateway served a legacy request (the request span's ``mcp_gateway.kind``)."""

    BRIDGED = "bridged"  # forwarded upstream through the bridge machine (MRTR rounds possible)
    LOCAL = "local"  # answered by the gateway itself (ping, logging/setLevel, subscriptions, ...)
    INITIALIZE = "initialize"  # the 2025 handshake, answered from the upstream's server/discover
    PASSTHROUGH = "passthrough"  # a 2026-07-28 request passed through unchanged


class RoundOutcome(StrEnum):
    """What an upstream round answered, as the bridge machine acted on it (the round span's outcome)."""

    INPUT_REQUIRED = "input_required"  # it asked for input the client is now asked for
    WAITING = "waiting"  # requestState only (or only URLs already accepted): retried after a backoff
    FINISHED = "finished"  # the request ends here (its result or error)
    RETRY = "retry"  # answered from what the gateway knew (cached roots, accepted URLs): sent again at once


@dataclass(frozen=True, slots=True)
class OpenRound:
    """A CallUpstream in a batch: one upstream round span starts, numbered by the record's round."""

    round: int
    state_echoed: bool  # the round carries requestState back (2026-07-28 basic/patterns §Multi Round-Trip Requests)


@dataclass(frozen=True, slots=True)
class AskClient:
    """A live request to the client (sampling, elicitation, roots): one span until the client answers it."""

    gateway_id: str
    method: str
    kind: str | None
    params: Mapping[str, Any]


def span_name(method: str, params: Mapping[str, Any] | None) -> str:
    """``{mcp.method.name} {target}`` where the request has a target (a tool's or prompt's name)."""
    target = (params or {}).get("name") if method in ("tools/call", "prompts/get") else None
    return f"{method} {target}" if isinstance(target, str) else method


def request_attributes(method: str, params: Mapping[str, Any] | None, version: str | None, kind: RequestKind,
                       peer: str | None, *, content: bool) -> dict[str, AttrValue]:
    """The request span's attributes when it starts."""
    attrs: dict[str, AttrValue] = {"mcp.method.name": method, "mcp_gateway.kind": kind.value}
    if version:
        attrs["mcp.protocol.version"] = version
    if peer:
        attrs["mcp_gateway.peer"] = peer
    name = (params or {}).get("name")
    if method == "tools/call" and isinstance(name, str):
        attrs["gen_ai.tool.name"] = name
    if content and params is not None and "arguments" in params:
        attrs["mcp_gateway.arguments"] = dumps(params["arguments"]).decode()
    return attrs


def finished_attributes(message: Mapping[str, Any] | None, rounds: int, upstream_calls: int,
                        kinds: Sequence[str]) -> tuple[dict[str, AttrValue], str | None]:
    """The request span's attributes at its end, and its error description (None: not an error). ``message``
    is the final JSON-RPC answer (None: cancelled, nothing was sent)."""
    attrs: dict[str, AttrValue] = {"mcp_gateway.rounds": rounds, "mcp_gateway.upstream_calls": upstream_calls,
                                   "mcp_gateway.input_kinds": list(kinds)}
    if message is None:
        attrs["mcp_gateway.cancelled"] = True
        return attrs, None
    return {**attrs, **answer_attributes(message)}, error_description(message)


def answer_attributes(message: Mapping[str, Any]) -> dict[str, AttrValue]:
    error = message.get("error")
    if isinstance(error, Mapping) and isinstance(error.get("code"), int):
        return {"rpc.jsonrpc.error_code": error["code"]}
    result = message.get("result")
    if isinstance(result, Mapping) and result.get("isError") is True:
        return {"mcp_gateway.tool_error": True}  # a tool's own failure (2025-11-25 server/tools §Error Handling)
    return {}


def error_description(message: Mapping[str, Any]) -> str | None:
    error = message.get("error")
    if not isinstance(error, Mapping):
        return None
    return f"{error.get('code')} {error.get('message')}"


def opened(record: PendingRound, actions: Sequence[B.Action]) -> tuple[OpenRound | None, list[AskClient]]:
    """The spans a batch starts: an upstream round (CallUpstream), and one per request sent to the client."""
    round_ = next((OpenRound(record.round, record.request_state is not None)
                   for a in actions if isinstance(a, B.CallUpstream)), None)
    asks = []
    for action in actions:
        if isinstance(action, B.SendToClient) and "id" in action.message and "method" in action.message:
            message = action.message
            given = message.get("params")
            params: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
            kind, _features = input_kind({"method": message["method"], "params": params})
            asks.append(AskClient(str(message["id"]), str(message["method"]), kind, params))
    return round_, asks


def round_outcome(actions: Sequence[B.Action]) -> RoundOutcome:
    """What the batch after an upstream round did with its answer."""
    if any(isinstance(a, B.Finish) for a in actions):
        return RoundOutcome.FINISHED
    if any(isinstance(a, B.SendToClient) and "id" in a.message for a in actions):
        return RoundOutcome.INPUT_REQUIRED
    if any(isinstance(a, B.ArmTimer) and a.name is B.Timer.BACKOFF for a in actions):
        return RoundOutcome.WAITING
    return RoundOutcome.RETRY


def round_attributes(round_: OpenRound, method: str) -> dict[str, AttrValue]:
    return {"mcp.method.name": method, "mcp_gateway.round": round_.round,
            "mcp_gateway.request_state_echoed": round_.state_echoed}


def ask_attributes(ask: AskClient, *, content: bool) -> dict[str, AttrValue]:
    attrs: dict[str, AttrValue] = {"mcp.method.name": ask.method, "jsonrpc.request.id": ask.gateway_id}
    if ask.kind is not None:
        attrs["mcp_gateway.input_kind"] = ask.kind
    if content:
        attrs["mcp_gateway.params"] = dumps(ask.params).decode()
    return attrs


def answered_asks(open_ids: Sequence[str], record: PendingRound) -> list[str]:
    """The open client-request spans whose answer has come: their ids are no longer outstanding."""
    return [gid for gid in open_ids if gid not in record.outstanding]


def finish_message(actions: Sequence[B.Action]) -> tuple[bool, Mapping[str, Any] | None]:
    """(whether the batch finishes the request, its final message)."""
    for action in actions:
        if isinstance(action, B.Finish):
            return True, action.message
    return False, None
