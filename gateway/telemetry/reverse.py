"""Usage accounting of the reverse bridge
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): a 2026-07-28 request served from a
2025-11-25 upstream is recorded once, as the forward direction's bridged requests are, in the same store and
``/metrics`` families: era ``modern`` (the client's), ``translated`` (the gateway carried it across eras), the round it
asked its client (an ``input_required`` answer is one bridged round) and the kinds of the legacy server's requests in it
(``mcp_gateway_bridged_inputs``: which legacy features 2026 clients still reach) and the upstream's configured name
(the report's "modern clients -> legacy servers" section groups by it); its deprecated features are the
client's own, as for a passthrough (adapters.usage.modern_request_features). Which legacy servers are behind the gateway
is the ``mcp_gateway_legacy_upstream_sessions`` gauge, set from the bridge's pool at each scrape.

A 2025 client's request relayed as it is to a 2025-era upstream (:class:`RelayedWatch`) is recorded too, once, as
the gateway's own sessions' requests are: era ``legacy``, not ``translated``, its features
(adapters.usage.legacy_request_features), its outcome and the kinds of the server's requests on its stream, read
from the answer as it streams past (adapters.usage.RelayedAnswer), and the upstream's name (the report's "legacy
clients -> legacy servers" section, docs/design/eras.md#relayed-2025-requests-are-counted-in-the-usage-report).

Only labels and counts are kept, never a message's content (adapters.usage).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Mapping
from typing import Any

from aiohttp import web

from adapters.errors import INTERNAL_ERROR, ErrorValue
from adapters.jsonwire import loads
from adapters.usage import (
    INPUT_KINDS,
    RelayedAnswer,
    input_kind,
    legacy_request_features,
    modern_request_features,
    ordered,
    outcome_of,
)
from gateway.telemetry.usage import (
    _BRIDGED,
    _STARTED,
    USAGE,
    UsageRecorder,
    _transport,
    configured_peer,
    facts_of,
    request_identity,
)

log = logging.getLogger("gateway")
_REVISION_META = "io.modelcontextprotocol/protocolVersion"


class ReverseWatch:
    """One reverse-bridged HTTP request, recorded at :meth:`done`. Never raises into the request."""

    def __init__(self, recorder: UsageRecorder, request: web.Request, gw: Any, principal: str,
                 message: Mapping[str, Any], grant: Any = None, upstream: str = "") -> None:
        self.recorder, self.request, self.gw, self.upstream = recorder, request, gw, upstream
        self.principal, self.message, self.grant = principal, message, grant
        self.rounds = 0
        self.inputs: set[str] = set()
        self.outcome: tuple[str, str] | None = None
        request[_BRIDGED] = True  # recorded here: the plain answer's accounting must not count it again

    def asked(self, requests: Mapping[str, Any]) -> None:
        """The request was answered ``input_required``: one round, with these legacy server requests."""
        self.rounds += 1
        for entry in requests.values():
            kind, _ = input_kind(entry)  # its deprecated features count on the retry that answers it
            if kind is not None:
                self.inputs.add(kind)

    def ended(self, error: ErrorValue | None, cancelled: bool = False) -> None:
        self.outcome = outcome_of(None if cancelled else {"error": error.to_wire()} if error else {"result": 0})

    def done(self, response: web.StreamResponse) -> None:
        try:
            self._record(response)
        except Exception:
            log.exception("usage accounting failed for a reverse-bridged request (it was answered)")

    def _record(self, response: web.StreamResponse) -> None:
        params = self.message.get("params")
        params = params if isinstance(params, Mapping) else {}
        meta = params.get("_meta")
        meta = meta if isinstance(meta, Mapping) else {}
        info, peer, sunset = request_identity(self.gw, None, "modern", self.principal, dict(params), self.grant)
        outcome = self.outcome or _outcome_of(response)
        features = ordered(modern_request_features(params))
        inputs = tuple(k for k in INPUT_KINDS if k in self.inputs)
        recorder = self.recorder
        recorder.note(facts_of(recorder.clock_ms(), "modern", meta.get(_REVISION_META, "2026-07-28"),
                               self.message.get("method"), True, info, peer, sunset, rounds=self.rounds,
                               inputs=inputs, features=features, outcome=outcome,
                               configured=configured_peer(self.gw, peer), upstream=self.upstream))
        if recorder.metrics is not None and _STARTED in self.request:
            recorder.metrics.request_seconds("modern", time.perf_counter() - self.request[_STARTED])


def _outcome_of(response: web.StreamResponse) -> tuple[str, str]:
    """An answer the bridge gave without running a call (a refusal of the 2026 ladder, discover, a listen): its
    JSON error, if it is one (the gateway's own small body); otherwise an answer."""
    body = getattr(response, "body", None)
    if isinstance(body, bytes) and b'"error"' in body and len(body) < 64 << 10:
        try:
            return outcome_of(loads(body))
        except ValueError:
            pass
    return outcome_of({"result": 0} if response.status < 400 else {"error": {"code": INTERNAL_ERROR}})


def reverse_watch(request: web.Request, gw: Any, principal: str, message: Mapping[str, Any],
                  grant: Any = None, upstream: str = "") -> ReverseWatch | None:
    """The watch of a request about to be reverse-bridged to ``upstream`` (its configured name), or None when usage
    recording is off."""
    recorder = request.app.get(USAGE)
    if recorder is None or not recorder.config.enabled:
        return None
    return ReverseWatch(recorder, request, gw, principal, message, grant, upstream)


class RelayedWatch:
    """The 2025 requests of one relayed POST (one, or a 2025-03-26 batch's), recorded at :meth:`done` with the
    outcome its answer gave (a batch's elements share it). Never raises into the request."""

    def __init__(self, recorder: UsageRecorder, request: web.Request, gw: Any, principal: str, grant: Any,
                 message: object, upstream: str, client_info: Mapping[str, str] | None,
                 max_event_bytes: int) -> None:
        self.recorder, self.request, self.gw, self.upstream = recorder, request, gw, upstream
        self.principal, self.grant, self.client_info = principal, grant, client_info
        elements = message if isinstance(message, list) else [message]
        # Requests only, as for the gateway's own sessions: notifications and a client's answers are not counted.
        self.requests = [m for m in elements if isinstance(m, Mapping) and "method" in m and "id" in m]
        self.max_event_bytes = max_event_bytes
        self.answer: RelayedAnswer | None = None

    def scan(self, status: int, sse: bool) -> RelayedAnswer:
        """``relay_legacy``'s scanner of the answer, for the (first) request's id."""
        ident = self.requests[0].get("id") if len(self.requests) == 1 else None
        self.answer = RelayedAnswer(ident, status, sse, self.max_event_bytes)
        return self.answer

    async def watched(self, pending: Awaitable[web.StreamResponse]) -> web.StreamResponse:
        """``pending``'s answer, recorded once given, or once the relay is cancelled (the client hung up before
        the server's stream ended: the outcome the scan read, when the answer had passed, else cancelled)."""
        answer: web.StreamResponse | None = None
        try:
            answer = await pending
            return answer
        finally:
            self.done(answer)

    def done(self, response: web.StreamResponse | None) -> None:
        try:
            self._record(response)
        except Exception:
            log.exception("usage accounting failed for a relayed 2025 request (it was answered)")

    def _record(self, response: web.StreamResponse | None) -> None:
        inputs: tuple[str, ...] = ()
        leaned: tuple[str, ...] = ()
        if self.answer is not None and len(self.requests) == 1:
            outcome = self.answer.outcome()
            inputs, leaned = self.answer.inputs(), self.answer.features()
        else:  # answered by the gateway (a refusal) or a batch: its status says; which element the server asked
            # for, a batch's stream does not say cheaply: its records carry no input kinds
            outcome = _outcome_of(response) if response is not None else outcome_of(None)
        recorder, headers = self.recorder, self.request.headers
        for message in self.requests:
            method, params = message.get("method"), message.get("params")
            params = params if isinstance(params, Mapping) else {}
            initialize = method == "initialize"
            info = params.get("clientInfo") if initialize else self.client_info
            _, peer, sunset = request_identity(self.gw, None, "initialize", self.principal,
                                               {"clientInfo": info} if isinstance(info, Mapping) else {}, self.grant)
            # Without the header a server assumes 2025-03-26 (2025-11-25 basic/transports §Protocol Version Header).
            revision = params.get("protocolVersion") if initialize else headers.get("mcp-protocol-version")
            recorder.note(facts_of(recorder.clock_ms(), "legacy", revision or "2025-03-26", method, False, info, peer,
                                   sunset, inputs=inputs, features=legacy_request_features(method, params) + leaned,
                                   outcome=outcome, transport=_transport(self.gw, self.request),
                                   configured=configured_peer(self.gw, peer), upstream=self.upstream))
        if recorder.metrics is not None and _STARTED in self.request and self.requests:
            recorder.metrics.request_seconds("legacy", time.perf_counter() - self.request[_STARTED])


def relayed_watch(request: web.Request, gw: Any, principal: str, grant: Any, message: object, upstream: str,
                  client_info: Mapping[str, str] | None, max_event_bytes: int) -> RelayedWatch | None:
    """The watch of a 2025 POST about to be relayed to ``upstream`` (its configured name), or None when usage
    recording is off or it holds no request."""
    recorder = request.app.get(USAGE)
    if recorder is None or not recorder.config.enabled or request.method != "POST":
        return None
    watch = RelayedWatch(recorder, request, gw, principal, grant, message, upstream, client_info, max_event_bytes)
    return watch if watch.requests else None
