"""``gateway.telemetry.metrics.Metrics``: timings wait for the next drain (flush, scrape, dashboard) instead of taking a
histogram lock on the request path, and a long wait between drains cannot grow without bound."""

from __future__ import annotations

import gateway.telemetry.metrics as metrics_module
from gateway.telemetry.metrics import Metrics


def _count(metrics: Metrics, name: str) -> float:
    return sum(s.value for family in metrics.registry.collect() for s in family.samples if s.name == name)


def test_timings_reach_the_histograms_at_the_fold() -> None:
    metrics = Metrics()
    metrics.request_seconds("legacy", 0.002)
    metrics.request_seconds("modern", 0.004)
    metrics.bridge_timings([0.001, 0.003], 0.0005)
    assert _count(metrics, "mcp_gateway_request_seconds_count") == 0  # noted, not yet observed
    metrics.fold()
    assert _count(metrics, "mcp_gateway_request_seconds_count") == 2
    assert _count(metrics, "mcp_gateway_request_seconds_sum") == 0.006
    assert _count(metrics, "mcp_gateway_mrtr_round_seconds_count") == 2
    assert _count(metrics, "mcp_gateway_translation_overhead_seconds_count") == 1
    metrics.fold()  # nothing is observed twice
    assert _count(metrics, "mcp_gateway_request_seconds_count") == 2


def test_the_wait_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(metrics_module, "FOLD_AT", 3)
    metrics = Metrics()
    for _ in range(7):
        metrics.request_seconds("legacy", 0.001)
        metrics.bridge_timings([0.001], 0.001)
        # Nothing waits past the bound, and nothing is lost or counted twice on the way.
        assert max(len(metrics._latencies), len(metrics._rounds), len(metrics._overheads)) < 3
    assert _count(metrics, "mcp_gateway_request_seconds_count") + len(metrics._latencies) == 7
    assert _count(metrics, "mcp_gateway_translation_overhead_seconds_count") + len(metrics._overheads) == 7
