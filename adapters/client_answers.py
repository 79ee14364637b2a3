"""The results a 2025-11-25 client returns for the bridge's live requests, built from the simple values a test
or a scenario file gives (2025-11-25 client §Sampling, §Elicitation, §Roots).

Shared by the pytest plugin (``gateway.ops.testing``) and ``python -m gateway replay`` so that "answer the
sampling request with this text" means the same result in both.
"""

from __future__ import annotations

from collections.abc import Iterable

from adapters.jsonwire import JsonObject, JsonView

MODEL = "legacy-test-client"


def sampling_result(answer: str | JsonView) -> JsonObject:
    """Text becomes a one-block ``CreateMessageResult``; a mapping is taken as the full result."""
    if isinstance(answer, str):
        return {"role": "assistant", "content": {"type": "text", "text": answer}, "model": MODEL,
                "stopReason": "endTurn"}
    return dict(answer)


def roots_result(roots: Iterable[str | JsonView]) -> JsonObject:
    """URIs become ``{"uri": ...}`` roots; a mapping is taken as the full root (with its ``name``)."""
    return {"roots": [{"uri": root} if isinstance(root, str) else dict(root) for root in roots]}
