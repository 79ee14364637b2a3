"""Prometheus ``GET /metrics`` (usage accounting), with the standard ``prometheus_client`` library.

Owns the metric families and their updates from :class:`adapters.usage.UsageRecord` values. Each app gets its
own ``CollectorRegistry`` (tests and benchmarks build many apps in one process; the global registry would
refuse duplicate names). Every label value has already been folded by ``adapters.usage.LabelFolder`` or comes
from a fixed set, so the number of series is bounded; the ``client`` label is a known client name or a configured
peer's client, any other name is ``other`` (``UsageRecord.metric_client``). Client versions are left out of
metrics on purpose (they are in the report): they multiply series for little operational value.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from adapters.usage import FAILURE_CAUSES, UsageRecord, clean_label

# Timings wait in lists until the next drain (every flush, scrape and dashboard read), as request facts do: an
# observe walks the buckets in Python and takes a lock, three per request. Past this many, they fold at once.
FOLD_AT = 10_000
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        # Label values, (id(family), *label values), or an era: each key kind is used by one method.
        self._children: dict[tuple[object, ...] | str, Any] = {}
        self.requests = Counter("mcp_gateway_requests",
                                "Requests by peer, client, era, revision, method, outcome, transport (the door)",
                                ["peer", "client", "era", "revision", "method", "translated", "outcome", "transport"],
                                registry=r)
        self.features = Counter("mcp_gateway_deprecated_feature_uses", "Requests that used a deprecated feature",
                                ["peer", "client", "feature"], registry=r)
        self.inputs = Counter("mcp_gateway_bridged_inputs", "Requests whose MRTR rounds bridged an input kind",
                              ["peer", "input_kind"], registry=r)
        self.rounds = Counter("mcp_gateway_mrtr_rounds", "MRTR rounds bridged", ["peer"], registry=r)
        self.failures = Counter("mcp_gateway_translation_failures", "Translation failures by cause",
                                ["peer", "cause"], registry=r)
        self.latency = Histogram("mcp_gateway_request_seconds", "Request duration at the gateway", ["era"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.overhead = Histogram("mcp_gateway_translation_overhead_seconds",
                                  "Gateway time of a bridged request outside upstream rounds and client waits",
                                  buckets=_LATENCY_BUCKETS, registry=r)
        self.round_latency = Histogram("mcp_gateway_mrtr_round_seconds", "Upstream latency of one bridged round",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.sessions = Gauge("mcp_gateway_active_legacy_sessions", "Legacy sessions active, by revision",
                              ["revision"], registry=r)
        # [gateway.auth]: tokens refused at a door, by adapters.authz.Cause value and door path (both fixed sets).
        self.authorization = Counter("mcp_gateway_authorization_refusals",
                                     "Requests refused at the gateway's token check, by cause and door",
                                     ["cause", "door"], registry=r)
        # Upstream tasks of legacy clients: driven for a call, or 2025 tasks (adapters.task_poll.TaskOutcome
        # values: a fixed set).
        self.tasks = Counter("mcp_gateway_tasks", "Upstream tasks of legacy clients (driven or 2025), by outcome",
                             ["outcome"], registry=r)
        # The reverse bridge's pooled sessions at a 2025-era upstream, by its serverInfo name and revision.
        self.legacy_upstreams = Gauge("mcp_gateway_legacy_upstream_sessions",
                                      "Sessions the reverse bridge holds at legacy upstream servers",
                                      ["server", "revision"], registry=r)
        self._latencies: list[tuple[str, float]] = []  # (era, seconds), not yet in the histogram
        self._rounds: list[float] = []
        self._overheads: list[float] = []

    def task_ended(self, outcome: str) -> None:
        self.tasks.labels(outcome).inc()

    def authorization_refused(self, cause: str, door: str) -> None:
        self.authorization.labels(cause, door).inc()

    def observe(self, record: UsageRecord, count: int = 1) -> None:
        """``count`` requests that all look like ``record`` (the recorder drains identical facts at once)."""
        key = (record.peer, record.metric_client, record.era, record.revision, record.method,
               "true" if record.translated else "false", record.outcome, record.transport)
        child = self._children.get(key)
        if child is None:  # label lookups cost more than the increment; the key set is bounded (folded labels)
            child = self._children[key] = self.requests.labels(*key)
        child.inc(count)
        for feature in record.features:
            self._child(self.features, record.peer, record.metric_client, feature).inc(count)
        for kind in record.inputs if record.translated else ():  # a relayed request's are not bridged
            self.inputs.labels(record.peer, kind).inc(count)
        if record.rounds:
            self.rounds.labels(record.peer).inc(record.rounds * count)
        if record.cause in FAILURE_CAUSES:
            self.failures.labels(record.peer, record.cause).inc(count)

    def _child(self, family: Any, *labels: str) -> Any:
        key = (id(family), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
        return child

    def request_seconds(self, era: str, seconds: float) -> None:
        self._latencies.append((era, seconds))
        if len(self._latencies) >= FOLD_AT:
            self.fold()

    def bridge_timings(self, rounds: list[float], overhead: float) -> None:
        self._rounds.extend(rounds)
        self._overheads.append(overhead)
        if len(self._overheads) >= FOLD_AT:
            self.fold()

    def fold(self) -> None:
        """Put the timings noted since the last fold into their histograms."""
        latencies, rounds, overheads = self._latencies, self._rounds, self._overheads
        self._latencies, self._rounds, self._overheads = [], [], []
        for era, seconds in latencies:
            child = self._children.get(era)
            if child is None:
                child = self._children[era] = self.latency.labels(era)
            child.observe(seconds)
        for seconds in rounds:
            self.round_latency.observe(seconds)
        for seconds in overheads:
            self.overhead.observe(seconds)

    def set_sessions(self, by_revision: dict[str, int]) -> None:
        self.sessions.clear()
        for revision, count in by_revision.items():
            self.sessions.labels(revision).set(count)

    def set_legacy_upstreams(self, by_server: dict[tuple[str, str], int]) -> None:
        """``by_server``: (server name, revision) -> sessions; a name is the upstream's own (operator-chosen
        upstreams, so few), cleaned to a printable label."""
        self.legacy_upstreams.clear()
        for (server, revision), count in by_server.items():
            self.legacy_upstreams.labels(clean_label(server), clean_label(revision)).set(count)
