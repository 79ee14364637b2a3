"""What /healthz and /readyz answer (adapters.health)."""

from __future__ import annotations

from adapters.health import Dependency, liveness, readiness


def test_readiness() -> None:
    assert liveness().status == 200 and liveness().body == {"status": "ok"}
    assert readiness({}).status == 200
    down = readiness({Dependency.STORE: "refused"})
    assert down.status == 503 and down.body["failed"] == {"store": "refused"}
