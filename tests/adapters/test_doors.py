"""adapters.doors: the door header is trusted only with the process's key, and each door offers its revisions."""

from __future__ import annotations

import pytest

from adapters.doors import Transport, door_header, offered_versions, transport_of
from adapters.peers import Peer, legacy_answer_version

KEY = "k" * 43


@pytest.mark.parametrize("transport", list(Transport))
def test_a_door_header_with_the_key_names_its_transport(transport: Transport) -> None:
    assert transport_of(door_header(transport, KEY), KEY) is transport


@pytest.mark.parametrize("value", [None, "", "http_sse", "http_sse wrong", "http_sse " + KEY + "x", "carrier " + KEY,
                                   " " + KEY, "websocket"])
def test_anything_else_is_streamable_http(value: str | None) -> None:
    assert transport_of(value, KEY) is Transport.STREAMABLE_HTTP


def test_no_key_trusts_no_header() -> None:
    assert transport_of("stdio ", "") is Transport.STREAMABLE_HTTP


def test_2024_11_05_is_offered_on_the_doors_of_its_transports_and_on_mcp_only_when_configured() -> None:
    assert "2024-11-05" not in offered_versions(Transport.STREAMABLE_HTTP)
    assert "2024-11-05" in offered_versions(Transport.STREAMABLE_HTTP, mcp_allows_2024=True)
    for door in (Transport.HTTP_SSE, Transport.STDIO, Transport.WEBSOCKET):
        assert offered_versions(door)[0] == "2025-11-25" and "2024-11-05" in offered_versions(door)


def test_the_answer_version_respects_both_the_door_and_the_pins() -> None:
    default = Peer("default")
    assert legacy_answer_version(default, "2024-11-05", offered_versions(Transport.HTTP_SSE)) == "2024-11-05"
    assert legacy_answer_version(default, "2024-11-05", offered_versions(Transport.STREAMABLE_HTTP)) == "2025-11-25"
    pinned = Peer("new-only", ("2025-11-25",))
    assert legacy_answer_version(pinned, "2024-11-05", offered_versions(Transport.HTTP_SSE)) == "2025-11-25"
