"""What the health endpoints answer (``GET /healthz``, ``GET /readyz``; the I/O is ``gateway.http.health``).

Liveness says only that the process serves HTTP; readiness, whether a load balancer should send it sessions: the
session store answers and the upstream was reachable at its last check. Neither is an MCP message, so both are
plain JSON for load balancers, never JSON-RPC.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from adapters.jsonwire import JsonObject

__all__ = ["Dependency", "Readiness", "liveness", "readiness"]


class Dependency(StrEnum):
    STORE = "store"
    UPSTREAM = "upstream"
    AUTHORIZATION = "authorization"  # [gateway.auth]: an issuer's signing keys cannot be had


@dataclass(frozen=True, slots=True)
class Readiness:
    status: int  # the HTTP status: 200, or 503 for a load balancer to stop sending traffic here
    body: JsonObject = field(default_factory=dict)


def liveness() -> Readiness:
    return Readiness(200, {"status": "ok"})


def readiness(failed: dict[Dependency, str]) -> Readiness:
    """200 when nothing failed, else 503 naming each dependency that did and why."""
    if not failed:
        return Readiness(200, {"status": "ready"})
    return Readiness(503, {"status": "not ready", "failed": {dep.value: why for dep, why in failed.items()}})
