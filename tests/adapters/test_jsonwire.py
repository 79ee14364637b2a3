"""``adapters.jsonwire``: orjson where it is exact, the stdlib where it would not be. Every value reads exactly as
``json.loads`` reads it (checked against it on edge cases and on seeded random documents), non-numbers are
refused, and what is written reads back to the same value."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from adapters.jsonwire import ENCODED_DEPTH, MAX_DEPTH, TooDeep, dumps, loads


def _same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (1 is not 1.0, -0.0 is not 0.0, int keys order kept)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


EDGES = [
    b"9223372036854775807", b"-9223372036854775808", b"-9223372036854775809", b"18446744073709551615",
    b"18446744073709551616", b"123456789012345678901234567890", b'{"id":99999999999999999999,"x":[1]}',
    b'{"n":-9999999999999999999}', b'"1234567890123456789012345"', b"0.1", b"-0.0", b"-0", b"1E2", b"1e-5",
    b"5e-324", b"2.2250738585072014e-308", b"1.7976931348623157e308", b"0.1000000000000000055511151231257827",
    b'{"a":1,"a":2,"b":3}', b'"\\ud800"', b'"\\udfff x \\ud83d\\ude00"', '"é \u2028"'.encode(), b'"\\u0000"',
    b"\xef\xbb\xbf{}", '{"k": "é"}'.encode("utf-16"), b"  [ 1 , 2 ]  ", b"[" * 150 + b"]" * 150,
    b'{"params":{"_meta":{"progressToken":12345678901234567890123}}}',
]
INVALID = [b"", b"{", b"[1,]", b"01", b"1.", b".5", b'"\t"', b"{'a':1}", b"\xff", b"[1] x", b"nul",
           b"[12345678901234567890"]


@pytest.mark.parametrize("text", EDGES)
def test_edge_cases_read_exactly_as_the_stdlib_reads_them(text: bytes) -> None:
    assert _same(loads(text), json.loads(text))


@pytest.mark.parametrize("text", INVALID)
def test_what_the_stdlib_refuses_is_refused(text: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        loads(text)


@pytest.mark.parametrize("text", [b"NaN", b"[Infinity]", b'{"x":-Infinity}', b"1e400", b"[-1e400]",
                                  b'{"big":12345678901234567890,"x":1e999}'])
def test_numbers_that_are_not_json_numbers_are_refused(text: bytes) -> None:
    # The stdlib would read these as non-finite floats, which no encoder writes back as JSON (RFC 8259 §6).
    with pytest.raises(ValueError, match=r"not a JSON number|out of range"):
        loads(text)


def test_nesting_past_the_limit_is_a_parse_error_not_a_recursion_error() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        loads(b"[" * 5000 + b"]" * 5000)


def _deep(depth: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * depth + b"1" + closer * depth


@pytest.mark.parametrize("text", [
    _deep(MAX_DEPTH + 1), _deep(990), _deep(1020),
    b'{"a":' * MAX_DEPTH + b'{}' + b"}" * MAX_DEPTH,
    b'[12345678901234567890,' + _deep(MAX_DEPTH + 1) + b"]",  # read by the stdlib (a 20-digit integer)
    b'["\\ud800",' + _deep(500) + b"]",  # read by the stdlib (a lone surrogate)
    b"\xff\xfe" + ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)).encode("utf-16-le"),  # UTF-16, with a BOM
])
def test_one_depth_limit_for_every_parse_path(text: bytes) -> None:
    with pytest.raises(TooDeep, match="nested too deeply"):
        loads(text)
    with pytest.raises(TooDeep):
        loads(text.decode("utf-16") if text.startswith(b"\xff\xfe") else text.decode("utf-8", "surrogatepass"))


def test_the_limit_itself_reads_and_writes_back_and_wide_shallow_texts_are_not_deep() -> None:
    at_limit = _deep(MAX_DEPTH)
    assert dumps(loads(at_limit)) == at_limit
    wide = b"[" + b",".join([b'{"a":[1,{"b":[]}],"s":"[[[[{{{{"}'] * 500) + b"]"  # many brackets, depth 5
    assert len(loads(wide)) == 500
    assert loads(b'"' + b"[" * 5000 + b'"') == "[" * 5000  # brackets in a string are no nesting
    with pytest.raises(TooDeep):
        loads(_deep(ENCODED_DEPTH))
    assert dumps(loads(_deep(ENCODED_DEPTH), ENCODED_DEPTH)) == _deep(ENCODED_DEPTH)  # the encoder writes it


def test_dumps_refuses_a_value_too_deep_for_any_encoder_with_a_value_error() -> None:
    value: Any = 1
    for _ in range(5000):
        value = [value]
    with pytest.raises(ValueError, match="nested too deeply"):
        dumps(value)


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.randint(-(2 ** rng.choice((8, 53, 63, 64, 70, 200))), 2 ** rng.choice((8, 53, 63, 64, 70, 200)))
    if kind == 1:
        return rng.choice((rng.random() * 10 ** rng.randint(-320, 300), -rng.random(), 0.0, -0.0, 1e16))
    if kind == 2:
        return "".join(chr(rng.choice((rng.randint(32, 126), rng.randint(0, 0x10FFFF))))
                       for _ in range(rng.randint(0, 8)))
    if kind in (3, 4, 5):
        return rng.choice((None, True, False, "", "x" * 30, 7))
    if kind in (6, 7):
        return {_random_key(rng): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]


def _random_key(rng: random.Random) -> str:
    return rng.choice(("id", "params", "x", "\ud800", "é", str(rng.randint(0, 10 ** 25))))


def test_random_documents_read_as_the_stdlib_reads_them_and_write_back_to_the_same_value() -> None:
    rng = random.Random(20261203)
    for _ in range(3000):
        value = _random_value(rng)
        for text in (json.dumps(value).encode(),
                     json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")):
            try:
                expected = json.loads(text)
            except ValueError:  # a raw lone surrogate is not UTF-8: both refuse
                with pytest.raises(ValueError):
                    loads(text)
                continue
            assert _same(loads(text), expected), text
        assert _same(json.loads(dumps(value)), value)
        assert b"\n" not in dumps(value) and b"\r" not in dumps(value)  # one SSE data line


def test_what_orjson_cannot_write_is_written_exactly_by_the_stdlib() -> None:
    value = {"id": 2 ** 70, "text": "a\ud800b", "n": -(2 ** 64)}
    assert dumps(value) == b'{"id":1180591620717411303424,"text":"a\\ud800b","n":-18446744073709551616}'
    assert dumps({1: "x"}) == b'{"1":"x"}'  # a non-string key, as json.dumps writes it
    assert dumps({"k": "é"}) == '{"k":"é"}'.encode()  # otherwise compact UTF-8
    with pytest.raises(TypeError):
        dumps({"k": {1, 2}})  # not JSON at all: refused as json.dumps refuses it
