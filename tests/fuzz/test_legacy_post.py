"""Family 1: arbitrary legacy requests (GET/POST/DELETE, JSON-RPC-ish bodies, mutated headers) against one
gateway; every answer must satisfy the property in ``tests/fuzz/conftest.py``.

Header values that are not UTF-8 cannot be sent with aiohttp's client (it encodes ``str``), so those requests go
over a raw socket (:func:`raw_request`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import SESSION_VERSIONS, Harness, check_answer, fuzz_settings
from tests.fuzz.strategies import bodies, decode
from tests.gateway.conftest import text

header_text = st.text(st.characters(min_codepoint=0x20, blacklist_categories=("Cs", "Cc")), max_size=30)
NON_UTF8 = st.sampled_from([b"Bearer \xff", b"\xc3\x28", b"Bearer \xe2\x28\xa1tok", b"\x80" * 40])
REQUESTS = st.fixed_dictionaries({
    "method": st.sampled_from(["POST"] * 6 + ["GET", "GET", "DELETE"]),
    "body": bodies,
    "session": st.sampled_from(["main", "main", "main", "batch", "none", "other"]),
    "other_session": header_text,
    "headers": st.fixed_dictionaries({}, optional={
        "Accept": st.sampled_from(["application/json, text/event-stream", "text/event-stream", "application/json",
                                   "*/*", ""]) | header_text,
        "Content-Type": st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain",
                                         ""]) | header_text,
        "MCP-Protocol-Version": st.sampled_from([*SESSION_VERSIONS, "2025-06-18", "2026-07-28", ""]) | header_text,
        "Last-Event-ID": st.sampled_from(["a.1", "0.0", ".", "a.", "a." + "9" * 5000, "x.-1"]) | header_text,
        "Origin": st.sampled_from(["http://localhost", "http://evil.example", "null"]) | header_text,
        "Host": st.sampled_from(["127.0.0.1", "localhost:1", "evil.example", "[::1]:80"]) | header_text,
        "Authorization": st.sampled_from(["Bearer t", "Basic x"]) | header_text | NON_UTF8,
    }),
})


def prepare(harness: Harness, case: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The session version the case uses and its full headers (valid ones unless the case mutated them)."""
    version = SESSION_VERSIONS[1] if case["session"] == "batch" else SESSION_VERSIONS[0]
    headers: dict[str, Any] = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    legacy = harness.sessions[version]
    if case["session"] in ("main", "batch"):
        headers.update({"Mcp-Session-Id": legacy.session_id, "MCP-Protocol-Version": version})
    elif case["session"] == "other":
        headers["Mcp-Session-Id"] = case["other_session"]
    headers.update(case["headers"])
    return version, headers


async def send(harness: Harness, method: str, headers: dict[str, Any], body: bytes) -> tuple[int, str, bytes]:
    """(status, content type, body); a GET's event stream is left after its headers (it stays open)."""
    if any(isinstance(v, bytes) for v in headers.values()):
        return await raw_request(harness, method, headers, body)
    absent = [name for name in ("Accept", "Content-Type") if name not in headers]
    async with harness.client.request(method, "/mcp", data=body, headers=headers,
                                      skip_auto_headers=absent) as resp:
        if method == "GET" and resp.content_type == "text/event-stream":
            return resp.status, resp.content_type, b""
        return resp.status, resp.content_type, await resp.read()


async def raw_request(harness: Harness, method: str, headers: dict[str, Any], body: bytes) -> tuple[int, str, bytes]:
    """One HTTP/1.1 request with header bytes as given; reads the answer until the server closes."""
    server = harness.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    lines = [f"{method} /mcp HTTP/1.1".encode(), b"Connection: close", f"Content-Length: {len(body)}".encode()]
    if "Host" not in headers:
        lines.append(f"Host: {server.host}".encode())
    lines += [name.encode() + b": " + (v if isinstance(v, bytes) else v.encode()) for name, v in headers.items()]
    writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
    try:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        status = int(head.split(" ", 2)[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head.split("\r\n")[1:])}
        content_type = fields.get("content-type", "").split(";")[0]
        if content_type == "text/event-stream":
            return status, content_type, b""  # status and type checked; its messages are the aiohttp path's job
        return status, content_type, await reader.read()
    finally:
        writer.close()


async def one_request(harness: Harness, case: dict[str, Any]) -> None:
    for wanted in SESSION_VERSIONS:
        await harness.session(wanted)
    version, headers = prepare(harness, case)
    status, content_type, body = await send(harness, case["method"], headers, case["body"])
    check_answer(status, content_type, body, decode(case["body"]) if case["method"] == "POST" else None,
                 case["method"])
    if case["method"] == "DELETE" and status == 204:
        harness.forget(version)  # the case ended this session, as asked


@fuzz_settings(0.7)
@given(case=REQUESTS)
async def test_any_legacy_request_gets_a_json_rpc_answer(harness: Harness, case: dict[str, Any]) -> None:
    harness.upstream.script.update({"tools/call": lambda b, r: text("ok"), "tools/list": lambda b, r: {"tools": []}})
    version = SESSION_VERSIONS[1] if case["session"] == "batch" else SESSION_VERSIONS[0]
    await harness.run(lambda: one_request(harness, case), version)
