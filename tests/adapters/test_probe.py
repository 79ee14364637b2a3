"""adapters.probe: each kind of upstream told apart from the answers alone, and the client-facing error."""

from __future__ import annotations

import json

from adapters.errors import UPSTREAM_FAILURE
from adapters.probe import ProbeAnswer, UpstreamKind, http_failure, judge, judge_http, needs_initialize

DISCOVER = {"supportedVersions": ["2026-07-28"], "capabilities": {},
            "serverInfo": {"name": "notes", "version": "1.2"}}


def rpc(status: int, **message: object) -> ProbeAnswer:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, **message}).encode()
    return ProbeAnswer(status, "application/json", body)


def test_a_2026_server_is_named_with_its_version() -> None:
    verdict = judge(rpc(200, result=DISCOVER))
    assert verdict.kind is UpstreamKind.MODERN and "2026-07-28 server: notes 1.2" in verdict.message


def test_a_discover_result_over_sse_counts_too() -> None:
    event = b"event: message\ndata: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": DISCOVER}).encode()
    assert judge(ProbeAnswer(200, "text/event-stream", b": primed\n\n" + event + b"\n\n")).kind is UpstreamKind.MODERN


def test_2025_servers_asking_for_a_session_are_legacy() -> None:
    plain = ProbeAnswer(400, "text/plain", b"Bad Request: Missing session ID")
    sdk = rpc(400, error={"code": -32000, "message": "Bad Request: No valid session ID provided"})
    for answer in (plain, sdk):
        verdict = judge(answer)
        assert verdict.kind is UpstreamKind.LEGACY and "served in reverse" in verdict.message


def test_method_not_found_is_told_apart_by_the_initialize_probe() -> None:
    discover = rpc(200, error={"code": -32601, "message": "Method not found"})
    assert needs_initialize(judge_http(discover))
    init = rpc(200, result={"protocolVersion": "2025-06-18", "capabilities": {},
                            "serverInfo": {"name": "old", "version": "0.9"}})
    verdict = judge(discover, init)
    assert verdict.kind is UpstreamKind.LEGACY and "old 0.9" in verdict.message and "2025-06-18" in verdict.message


def test_an_unclear_error_becomes_legacy_when_initialize_succeeds() -> None:
    discover = rpc(400, error={"code": -32600, "message": "Unsupported protocol version"})
    assert judge(discover).kind is UpstreamKind.UNCLEAR
    init = rpc(200, result={"protocolVersion": "2025-11-25", "serverInfo": {"name": "s", "version": "1"}})
    assert judge(discover, init).kind is UpstreamKind.LEGACY


def test_not_mcp_at_that_path() -> None:
    for answer in (ProbeAnswer(404, "text/html", b"<html>Not Found</html>"),
                   ProbeAnswer(200, "text/html", b"<!doctype html><p>welcome"),
                   ProbeAnswer(200, "application/json", b'{"hello": "world"}')):
        verdict = judge(answer)
        assert verdict.kind is UpstreamKind.NOT_MCP and "not MCP at that path" in verdict.message, answer
    assert "an HTML page" in judge(ProbeAnswer(404, "text/html", b"<html>")).message


def test_unreachable_keeps_the_reason_and_needs_no_second_probe() -> None:
    verdict = judge_http(ProbeAnswer(failure="connection failed: Connection refused"))
    assert verdict.kind is UpstreamKind.UNREACHABLE and "Connection refused" in verdict.message
    assert not needs_initialize(verdict)


def test_a_credential_challenge_is_unclear_not_a_crash() -> None:
    verdict = judge(ProbeAnswer(401, "text/plain", b"unauthorized"))
    assert verdict.kind is UpstreamKind.UNCLEAR and "HTTP 401" in verdict.message


def test_the_client_error_says_what_the_probe_says() -> None:
    answer = ProbeAnswer(404, "text/html", b"<html>Not Found</html>")
    error = http_failure(answer)
    assert error.code == UPSTREAM_FAILURE
    assert error.message.startswith("upstream failure (http_status): HTTP 404 without a JSON-RPC body: ")
    assert judge_http(answer).message in error.message
    assert error.data == {"upstream": "http_status", "upstreamStatus": 404, "upstreamKind": "not_mcp"}
    legacy = http_failure(ProbeAnswer(400, "text/plain", b"Bad Request: Missing session ID"))
    assert legacy.data["upstreamKind"] == "legacy" and "2025-era" in legacy.message
