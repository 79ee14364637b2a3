"""The gateway's one JSON codec: every message it reads or writes, and every record it stores, goes through
:func:`loads` and :func:`dumps`.

orjson does the work where its result is exactly the standard library's, and the standard library does it where
orjson's would not be (the benchmark: the stdlib's parse and encode were about a fifth of the gateway's
instructions per translated request; README "What translation costs"):

- orjson reads an integer beyond 64 bits as a float, silently (ijl/orjson#308), which would change ids and
  arguments the gateway must forward unchanged. The shortest such integer has 19 digits (below -2**63), so a
  text holding a run of 19 digits anywhere is parsed by the stdlib; finding one costs a byte translation and a
  substring search, a small fraction of the parse it saves.
- orjson refuses what the stdlib reads differently: a lone surrogate escape (``"\\ud800"``), a byte-order mark,
  UTF-16/32 input. Those fall back to the stdlib, so they read as before. Nesting deeper than orjson's 1024
  levels is refused as a ``ValueError`` (the stdlib would raise ``RecursionError``, which is no parse error).
- NaN, Infinity and numbers beyond a double's range are not JSON numbers (RFC 8259 §6); the stdlib would read
  them as non-finite floats that no encoder can write back as JSON. Both paths refuse them (``ValueError``),
  so the messages that reach the encoder hold only finite numbers.
- On the way out, orjson cannot write a lone surrogate as UTF-8, an integer beyond 64 bits, or a non-string key.
  The stdlib writes those exactly, ASCII-escaped. Everything else is compact UTF-8 (RFC 8259 §8.1).

Errors are ``ValueError`` (``json.JSONDecodeError``, ``UnicodeDecodeError``), as from ``json.loads``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import orjson

# Digits stay '0', every other byte becomes a space: a run of 19 digits is then one substring search.
_DIGITS_ONLY: Final = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_LONG_DIGIT_RUN: Final = b"0" * 19
_ASCII_ENCODE: Final = json.JSONEncoder(separators=(",", ":")).encode


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _stdlib_loads(data: bytes | str) -> Any:
    try:
        return json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:  # deeper than orjson's 1024 levels: bad input, not a gateway failure
        raise ValueError("the JSON text is nested too deeply") from None


def loads(data: bytes | str) -> Any:
    """Parse one JSON text (bytes in any encoding ``json.loads`` accepts, or str)."""
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    if _LONG_DIGIT_RUN not in raw.translate(_DIGITS_ONLY):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # refused by orjson: the stdlib either reads it as it always did or raises
    return _stdlib_loads(data)


def dumps(value: Any) -> bytes:
    """Compact JSON, UTF-8. What orjson returns keeps its write buffer's capacity (4-8 KiB, whatever the
    length): fine for what is sent at once, but copy what is kept (``bytes(memoryview(data))``)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, a 65-bit integer, a non-string key
        return _ASCII_ENCODE(value).encode("ascii")
