"""Hypothesis strategies shared by the fuzz families: JSON values of every type (huge numbers, unicode, deep
nesting), JSON-RPC-ish messages with mutated fields, and their encoding to bytes.

Nesting deeper than Python's own ``json`` can encode is written as a :class:`Deep` placeholder that
:func:`encode` splices in as text, so the harness never recurses the way the gateway under test might.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

KNOWN_METHODS = ("initialize", "ping", "tools/list", "tools/call", "resources/list", "resources/read",
                 "resources/subscribe", "resources/unsubscribe", "resources/templates/list", "prompts/list",
                 "prompts/get", "completion/complete", "logging/setLevel", "tasks/get", "server/discover",
                 "subscriptions/listen", "notifications/initialized", "notifications/cancelled",
                 "notifications/progress", "notifications/roots/list_changed", "sampling/createMessage")
HUGE_NUMBERS = (2**63, -(2**63) - 1, 2**64, 10**40, -(10**400), 10**400, 1e308, -1e-320, 0.5)


@dataclass(frozen=True)
class Deep:
    """``depth`` nested arrays or objects around a 1, as raw JSON text (see :func:`encode`)."""

    depth: int
    kind: str  # "list" or "dict"

    def text(self) -> str:
        if self.kind == "list":
            return "[" * self.depth + "1" + "]" * self.depth
        return '{"a":' * self.depth + "1" + "}" * self.depth


_DEEP_MARK = re.compile(r'"\\u0000DEEP(\d+)(list|dict)\\u0000"')

deep = st.builds(Deep, st.sampled_from([30, 200, 999, 1000, 1001, 1100, 5000, 50_000]),
                 st.sampled_from(["list", "dict"]))
scalars = (st.none() | st.booleans() | st.integers() | st.sampled_from(HUGE_NUMBERS)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
any_json = json_values | deep  # anywhere a value goes: possibly too deep to parse
ids = st.integers() | st.text(max_size=10) | any_json
objects = st.dictionaries(st.text(max_size=10), any_json, max_size=5)


def _params_for(method: str) -> st.SearchStrategy[Any]:
    """Valid-looking params with mutated fields, or anything at all."""
    shaped = st.fixed_dictionaries({}, optional={
        "name": st.sampled_from(["t", "echo"]) | any_json, "arguments": objects | any_json,
        "uri": st.just("file:///a") | any_json, "requestId": ids, "reason": any_json, "level": any_json,
        "progressToken": ids, "progress": any_json, "cursor": any_json, "_meta": objects | any_json,
        "protocolVersion": st.sampled_from(["2025-11-25", "2025-03-26", "2026-07-28"]) | any_json,
        "capabilities": objects | any_json, "clientInfo": objects | any_json, "ref": objects | any_json,
        "argument": objects | any_json})
    return shaped | objects | any_json


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON-RPC-ish message: mostly a well-formed request/notification/response with mutated fields."""
    method = draw(st.sampled_from(KNOWN_METHODS) | st.text(max_size=20))
    out: dict[str, Any] = {"jsonrpc": draw(st.just("2.0") | st.just("2.0") | st.just("2.0") | any_json)}
    shape = draw(st.sampled_from(["request", "request", "notification", "response", "anything"]))
    if shape != "notification":
        out["id"] = draw(ids)
    if shape in ("request", "notification"):
        out["method"] = method
        if draw(st.booleans()):
            out["params"] = draw(_params_for(method))
    elif shape == "response":
        out.update(draw(st.sampled_from([{}, {"r": 1}, {"e": 1}, {"r": 1, "e": 1}])))
        if "r" in out:
            out["result"] = draw(any_json)
        if "e" in out:
            out["error"] = draw(any_json)
        out.pop("r", None), out.pop("e", None)
    else:
        out.update(draw(objects))
    return out


def encode(value: Any) -> bytes:
    """JSON text of ``value`` (non-ASCII kept, :class:`Deep` spliced in as text)."""
    text = json.dumps(value, ensure_ascii=False, default=lambda d: f"\x00DEEP{d.depth}{d.kind}\x00")
    text = _DEEP_MARK.sub(lambda m: Deep(int(m.group(1)), m.group(2)).text(), text)
    return text.encode("utf-8", "surrogatepass")


def decode(body: bytes) -> Any:
    """What a body means as JSON (None for non-JSON, or JSON too deep to read here)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


bodies = (messages().map(encode)
          | st.lists(messages(), max_size=4).map(encode)
          | st.binary(max_size=64)
          | st.sampled_from([b"", b"null", b"[]", b"{}", b'{"jsonrpc":"2.0"', b"\xff\xfe", b"[" * 100_000]))
