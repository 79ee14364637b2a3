"""The gateway's one JSON codec: every message it reads or writes, and every record it stores, goes through
:func:`loads` and :func:`dumps`.

orjson does the work where its result is exactly the standard library's (parsing and encoding are a large share
of a translated request's work: docs/benchmarks.md "Where the time goes"), and the standard library does it where
orjson's would not be:

- orjson reads an integer beyond 64 bits as a float, silently (ijl/orjson#308), which would change ids and
  arguments the gateway must forward unchanged. The shortest such integer has 19 digits (below -2**63), so a
  text holding a run of 19 digits anywhere is parsed by the stdlib; finding one costs a byte translation and a
  substring search, a small fraction of the parse it saves.
- orjson refuses what the stdlib reads differently: a lone surrogate escape (``"\\ud800"``), a byte-order mark,
  UTF-16/32 input. Those fall back to the stdlib, so they read as before.
- Nesting: the parsers read 1024 levels (orjson) or up to the interpreter's recursion limit (the stdlib), but
  orjson's encoder writes at most 254 and the stdlib's raises ``RecursionError`` near 1000. So one limit,
  :data:`MAX_DEPTH`, holds for every text read from outside (clients, upstreams): deeper is :class:`TooDeep`
  at parse time, and whatever the gateway then writes, with the few levels it adds around a value it re-wraps
  (:data:`ENVELOPE_DEPTH`), stays within what the encoder writes. Checking costs one byte count, on the same
  translated copy the digit search reads: a text with at most ``MAX_DEPTH`` ``[`` and ``{`` bytes cannot be
  deeper; only a text with more is walked, after parsing.
- NaN, Infinity and numbers beyond a double's range are not JSON numbers (RFC 8259 §6); the stdlib would read
  them as non-finite floats that no encoder can write back as JSON. Both paths refuse them (``ValueError``),
  so the messages that reach the encoder hold only finite numbers.
- On the way out, orjson cannot write a lone surrogate as UTF-8, an integer beyond 64 bits, or a non-string key.
  The stdlib writes those exactly, ASCII-escaped. Everything else is compact UTF-8 (RFC 8259 §8.1).

Errors are ``ValueError`` (``json.JSONDecodeError``, ``UnicodeDecodeError``, :class:`TooDeep`), as from
``json.loads``; :func:`dumps` raises ``ValueError`` too, never ``RecursionError``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final, TypeAlias, Union

import orjson

# The shapes of JSON the gateway handles, in one place for every module of adapters/ to use:
# - JsonValue: a value the gateway builds or copies through (a message, a result, a record), recursively.
# - JsonObject / JsonArray: its two containers, for what the gateway builds and may still add members to.
# - JsonView: a read-only view of an object someone else built (a client's message, an upstream's result):
#   a Mapping, so callers may pass any dict of JSON values, and the values are narrowed (isinstance) where used.
JsonValue: TypeAlias = Union["JsonObject", "JsonArray", str, int, float, bool, None]
JsonObject: TypeAlias = dict[str, JsonValue]
JsonArray: TypeAlias = list[JsonValue]
JsonView: TypeAlias = Mapping[str, JsonValue]
_NO_MEMBERS: Final[JsonView] = {}


def members(value: JsonValue) -> JsonView:
    """``value``'s members when it is a JSON object, else none: for an optional object member (``params``,
    ``_meta``, a capability) read where a missing and a malformed one mean the same."""
    return value if isinstance(value, Mapping) else _NO_MEMBERS

# A text's shape: digits become '0', both opening brackets '[', every other byte a space. A run of 19 digits is
# then one substring search, and the opening brackets one count: one translation of the text serves both.
_SHAPE: Final = bytes(48 if 48 <= byte <= 57 else 91 if byte in b"[{" else 32 for byte in range(256))
_LONG_DIGIT_RUN: Final = b"0" * 19
_ASCII_ENCODE: Final = json.JSONEncoder(separators=(",", ":")).encode
# Containers nested in one message read from a client or an upstream ("[]" is 1). orjson's encoder writes 254.
MAX_DEPTH: Final = 200
# Levels the gateway may add around a value it re-wraps: an answer in inputResponses (+2), a client's error
# object in data.clientError (+2), a batch's answer array (+1), a stored round's answers (+1). Generous.
ENVELOPE_DEPTH: Final = 16
# The deepest text the gateway itself writes (session records, its own answers): what it reads those back with.
ENCODED_DEPTH: Final = MAX_DEPTH + ENVELOPE_DEPTH
assert ENCODED_DEPTH < 255  # orjson.dumps: "Recursion limit reached" at 255 levels


class TooDeep(ValueError):
    """A JSON text nested deeper than the limit it is read with: bad input, refused before any encoder sees it."""

    def __init__(self, limit: int, value: JsonValue = None) -> None:
        super().__init__(f"the JSON text is nested too deeply (more than {limit} levels)")
        self.limit = limit
        self.value = value  # what was parsed, when a parser read it whole (a refusal can still name its id)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _stdlib_loads(data: bytes | str, max_depth: int) -> JsonValue:
    try:
        value: JsonValue = json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:  # deeper than the interpreter's stack: bad input, not a gateway failure
        raise TooDeep(max_depth) from None
    return value


def _deeper_than(value: JsonValue, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers: one level at a time, no recursion."""
    containers: list[JsonObject | JsonArray] = [value] if isinstance(value, (dict, list)) else []
    level = 0
    while containers:
        level += 1
        if level > limit:
            return True
        inner: list[JsonObject | JsonArray] = []
        for container in containers:
            items = container.values() if isinstance(container, dict) else container
            inner.extend(item for item in items if isinstance(item, (dict, list)))
        containers = inner
    return False


def loads(data: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one JSON text (bytes in any encoding ``json.loads`` accepts, or str) nested at most ``max_depth``
    levels: :data:`MAX_DEPTH` for what comes from outside, :data:`ENCODED_DEPTH` for what the gateway wrote."""
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    shape = raw.translate(_SHAPE)
    value = _parse(data, raw, shape, max_depth)
    # Fewer opening bytes than the limit: not deeper, whatever the encoding (UTF-16 only over-counts).
    if shape.count(b"[") > max_depth and _deeper_than(value, max_depth):
        raise TooDeep(max_depth, value)
    return value


def _parse(data: bytes | str, raw: bytes, shape: bytes, max_depth: int) -> JsonValue:
    if _LONG_DIGIT_RUN not in shape:
        try:
            value: JsonValue = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # refused by orjson: the stdlib either reads it as it always did or raises
        else:
            return value
    return _stdlib_loads(data, max_depth)


def dumps(value: object) -> bytes:
    """Compact JSON, UTF-8. What orjson returns keeps its write buffer's capacity (4-8 KiB, whatever the
    length): fine for what is sent at once, but copy what is kept (``bytes(memoryview(data))``). A value too
    deep for either encoder is a ``ValueError`` (never ``RecursionError``), for the caller to handle."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, a 65-bit integer, a non-string key, depth
        try:
            return _ASCII_ENCODE(value).encode("ascii")
        except RecursionError:
            raise ValueError("the value is nested too deeply to encode") from None
