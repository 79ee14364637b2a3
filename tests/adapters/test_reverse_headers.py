"""The reverse bridge's check of ``Mcp-Param-*`` headers against a legacy tool's ``x-mcp-header`` annotations
(adapters.reverse_wire.param_header_refusal; 2026-07-28 basic/transports §Server validation), table-driven."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from adapters import reverse_wire as W
from adapters.upstream import x_mcp_header_map

SCHEMA = {"type": "object", "properties": {
    "region": {"type": "string", "x-mcp-header": "Region"},
    "limit": {"type": "integer", "x-mcp-header": "Limit"},
    "dry": {"type": "boolean", "x-mcp-header": "Dry"},
    "where": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}}}}
MAP = x_mcp_header_map(SCHEMA)


def _b64(text: str) -> str:
    return f"=?base64?{base64.b64encode(text.encode()).decode()}?="


@pytest.mark.parametrize(("arguments", "headers"), [
    ({}, {}),  # nothing annotated is given: no header is due
    ({"region": "eu"}, {"mcp-param-region": "eu"}),
    ({"region": "Hello"}, {"mcp-param-region": _b64("Hello")}),  # the sentinel is decoded
    ({"region": "é"}, {"mcp-param-region": _b64("é")}),
    ({"limit": 42}, {"mcp-param-limit": "42"}),
    ({"limit": 42.0}, {"mcp-param-limit": "42"}),  # numbers compare by value
    ({"dry": True}, {"mcp-param-dry": "true"}),
    ({"dry": False}, {"mcp-param-dry": "false"}),
    ({"where": {"zone": "z1"}}, {"mcp-param-zone": "z1"}),  # a nested properties chain
    ({"region": None}, {}),  # null counts as absent
])
def test_mirrored_arguments_pass(arguments: dict[str, Any], headers: dict[str, str]) -> None:
    assert MAP is not None
    assert W.param_header_refusal(MAP, arguments, headers) is None


@pytest.mark.parametrize(("arguments", "headers", "says"), [
    ({"region": "eu"}, {}, "must be mirrored in the Mcp-Param-Region header"),
    ({}, {"mcp-param-region": "eu"}, "was sent but argument 'region' is absent"),
    ({"region": "eu"}, {"mcp-param-region": "us"}, "does not match argument 'region'"),
    ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVs!!!bG8=?="}, "does not match"),  # corrupt sentinel
    ({"limit": 42}, {"mcp-param-limit": "forty-two"}, "does not match argument 'limit'"),
    ({"limit": 42}, {"mcp-param-limit": " 42"}, "does not match"),
    ({"dry": True}, {"mcp-param-dry": "True"}, "does not match argument 'dry'"),
    ({"where": {"zone": "z1"}}, {"mcp-param-zone": "z2"}, "does not match argument 'where.zone'"),
])
def test_missing_stray_or_different_headers_are_header_mismatch(arguments: dict[str, Any], headers: dict[str, str],
                                                                says: str) -> None:
    assert MAP is not None
    refused = W.param_header_refusal(MAP, arguments, headers)
    assert refused is not None and (refused.status, refused.error.code) == (400, -32020)
    assert says in refused.error.message
