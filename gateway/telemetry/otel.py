"""OpenTelemetry spans of the gateway's traffic, as an :class:`~gateway.session.observer.Observer` (``[gateway.otel]
enabled``, ``serve --otel``): one span per legacy request, and within a bridged one a child span per upstream round
and per live request to the client.

Needs the optional ``otel`` extra (``opentelemetry-api``; the SDK and its OTLP exporter for ``serve``), imported
only when spans are on: the gateway runs unchanged without it. Spans go to the global tracer provider, which
``serve`` sets up from the standard ``OTEL_*`` environment variables (:func:`install_provider`) and a test may set
to the SDK's in-memory exporter. Names and attributes are decided by :mod:`kit.spans`; this module owns the
span objects and the clock. The round span is also the parent the upstream is told about: its W3C ``traceparent``
goes with that round's upstream request (:data:`gateway.upstream.client.CALL_HEADERS`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import inject
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from adapters.bridge import Action
from adapters.classify import Accepted, Kind
from adapters.jsonwire import loads
from adapters.peers import Peer, peer_from_record, trace_policy
from adapters.records import PendingRound, SessionRecord
from adapters.task_poll import TaskOutcome
from gateway.upstream.client import CALL_HEADERS
from kit import spans as S

log = logging.getLogger("gateway.otel")
INSTRUMENTATION = "mcp-legacy-gateway"
_ARRIVED = web.RequestKey("otel_arrived_ns", int)  # aiohttp's typed request storage
_BRIDGED = web.RequestKey("otel_bridged", bool)
_PLAIN_KINDS = {Kind.INITIALIZE: S.RequestKind.INITIALIZE, Kind.REQUEST: S.RequestKind.LOCAL,
                Kind.MODERN: S.RequestKind.PASSTHROUGH}
_MAX_PARSED = 64 << 10  # a plain answer is read for its error code only when it is small (the gateway's own)


class ExchangeSpans:
    """The spans of one bridged request, fed every action batch of its bridge machine (an ExchangeWatcher)."""

    def __init__(self, tracer: Tracer, root: Span, content: bool) -> None:
        self.tracer, self.root, self.content = tracer, root, content
        self.parent = trace.set_span_in_context(root)
        self.round: Span | None = None
        self.asks: dict[str, Span] = {}
        self.kinds: list[str] = []
        self.calls = 0
        self.final: tuple[bool, Mapping[str, Any] | None] = (False, None)
        self.ended = False

    def __call__(self, record: PendingRound, actions: list[Action]) -> None:
        try:
            self._step(record, actions)
        except Exception:
            log.exception("OpenTelemetry spans failed for a bridged request (the request itself goes on)")

    def _step(self, record: PendingRound, actions: list[Action]) -> None:
        for gid in S.answered_asks(list(self.asks), record):
            self.asks.pop(gid).end()
        if not actions:
            return
        if self.round is not None:
            self.round.set_attribute("mcp_gateway.outcome", S.round_outcome(actions).value)
            self.round.end()
            self.round = None
        opened, asks = S.opened(record, actions)
        for ask in asks:
            if ask.kind is not None and ask.kind not in self.kinds:
                self.kinds.append(ask.kind)
            self.asks[ask.gateway_id] = self.tracer.start_span(
                f"client {ask.method}", self.parent, SpanKind.CLIENT, S.ask_attributes(ask, content=self.content))
        if opened is not None:
            self.calls += 1
            self.round = self.tracer.start_span(f"upstream {record.method}", self.parent, SpanKind.CLIENT,
                                                S.round_attributes(opened, record.method))
            CALL_HEADERS.set(self._propagation(self.round))
        finished = S.finish_message(actions)
        if finished[0]:
            self.final = finished

    def _propagation(self, span: Span) -> Callable[[], dict[str, str]]:
        """The round's ``traceparent`` for the upstream call this batch starts (made in this context: the upstream
        task inherits it). Nothing once the request has ended, should the context outlive it."""
        carrier: dict[str, str] = {}
        inject(carrier, trace.set_span_in_context(span, otel_context.get_current()))
        return lambda: {} if self.ended else carrier

    def done(self) -> None:
        if self.ended:
            return
        self.ended = True
        try:
            self._end()
        except Exception:
            log.exception("OpenTelemetry spans failed for a bridged request (the request itself was answered)")

    def _end(self) -> None:
        for span in [*self.asks.values(), *([self.round] if self.round is not None else [])]:
            span.end()
        self.asks.clear()
        finished, message = self.final
        attrs, error = S.finished_attributes(message if finished else None, max(self.calls - 1, 0), self.calls,
                                             self.kinds)
        self.root.set_attributes(attrs)
        if error is not None:
            self.root.set_status(Status(StatusCode.ERROR, error))
        self.root.end()


class OtelObserver:
    """The gateway's spans as its :class:`~gateway.session.observer.Observer`."""

    def __init__(self, gw: Any, tracer: Tracer | None = None) -> None:
        self.gw = gw
        self.tracer = tracer or trace.get_tracer(INSTRUMENTATION)

    def arrived(self, request: web.Request) -> None:
        request[_ARRIVED] = time.time_ns()

    def task_ended(self, outcome: TaskOutcome) -> None:
        return None  # a count, not a span: a 2025 task ends outside any request

    def exchange(self, request: web.Request, session: SessionRecord,
                 message: dict[str, Any]) -> ExchangeSpans | None:
        request[_BRIDGED] = True
        enabled, content = self._policy(peer_from_record(session.pins) if session.pins else None)
        if not enabled:
            return None
        method, params = str(message.get("method")), message.get("params")
        params = params if isinstance(params, dict) else {}
        peer = session.pins.get("name")
        attrs = S.request_attributes(method, params, session.protocol_version, S.RequestKind.BRIDGED,
                                     peer if isinstance(peer, str) else None, content=content)
        root = self.tracer.start_span(S.span_name(method, params), kind=SpanKind.SERVER, attributes=attrs,
                                      start_time=request.get(_ARRIVED))
        return ExchangeSpans(self.tracer, root, content)

    def answered(self, request: web.Request, acc: Accepted, answer: web.StreamResponse,
                 bridged: bool | None = None) -> None:
        if (request.get(_BRIDGED) if bridged is None else bridged) or acc.kind not in _PLAIN_KINDS:
            return
        try:
            self._plain(request, acc, answer)
        except Exception:
            log.exception("OpenTelemetry span failed for a request (the request itself was answered)")

    def _plain(self, request: web.Request, acc: Accepted, answer: web.StreamResponse) -> None:
        method, params = str(acc.message.get("method")), acc.message.get("params")
        params = params if isinstance(params, dict) else {}
        peer = self.gw.request_peer(acc)
        enabled, content = self._policy(peer)
        if not enabled:
            return
        attrs = S.request_attributes(method, params, _version(acc), _PLAIN_KINDS[acc.kind],
                                     peer.name if peer is not None else None, content=content)
        span = self.tracer.start_span(S.span_name(method, params), kind=SpanKind.SERVER, attributes=attrs,
                                      start_time=request.get(_ARRIVED))
        message = _answer_message(answer)
        if message is not None:
            span.set_attributes(S.answer_attributes(message))
            error = S.error_description(message)
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def _policy(self, peer: Peer | None) -> tuple[bool, bool]:
        """(spans on, content kept) for the peer (``[peers.trace]``) over ``[gateway.trace]``."""
        config = self.gw.config.trace
        return trace_policy(peer, config.enabled, config.content)


def _version(acc: Accepted) -> str | None:
    if acc.session is not None:
        return acc.session.protocol_version
    params = acc.message.get("params")
    params = params if isinstance(params, dict) else {}
    if acc.kind is Kind.INITIALIZE:
        version = params.get("protocolVersion")
    else:
        meta = params.get("_meta")
        version = meta.get("io.modelcontextprotocol/protocolVersion") if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def _answer_message(answer: web.StreamResponse) -> Mapping[str, Any] | None:
    """A plain JSON answer's message (for its error code); None for a stream or anything large."""
    body = getattr(answer, "body", None)
    if not isinstance(body, bytes) or len(body) > _MAX_PARSED or answer.content_type != "application/json":
        return None
    try:
        message = loads(body)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def install_provider() -> str:
    """For ``serve``: the SDK's tracer provider with a batching OTLP/HTTP exporter, both configured by the standard
    ``OTEL_*`` variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ...); what it exports to."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", INSTRUMENTATION)})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")


def shutdown_provider() -> None:
    """Export what is still queued (``serve``'s exit)."""
    provider = trace.get_tracer_provider()
    shutdown = getattr(provider, "shutdown", None)
    if callable(shutdown):
        shutdown()
