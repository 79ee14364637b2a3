"""Family: the ``Authorization`` header against a gateway that checks tokens itself (``[gateway.auth]``, keys
from a loopback key server). Whatever the header holds (garbage, JWT-shaped noise, a good token with a flipped
byte, a huge or non-UTF-8 value), the answer is a documented refusal with a JSON-RPC body and the gateway's
challenge, never a 5xx; a good token still works after every case."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import check_answer, fuzz_settings
from tests.fuzz.test_legacy_post import raw_request
from tests.gateway.auth.keyserver import RESOURCE, KeyServer

PING = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}).encode()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# Control characters are refused by aiohttp's HTTP parser before any handler (400 text/plain, malformed HTTP), as
# the legacy-request family's header text leaves them out too.
printable = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=200)
jwt_shaped = st.tuples(st.binary(max_size=60), st.binary(max_size=200), st.binary(max_size=80)).map(
    lambda parts: ".".join(b64(p) for p in parts))
headers = st.one_of(
    printable,
    st.builds(lambda s: "Bearer " + s, printable),
    st.builds(lambda s: "Bearer " + s, jwt_shaped),
    st.builds(lambda scheme, s: f"{scheme} {s}", st.sampled_from(["bearer", "BEARER", "Basic", "DPoP", ""]),
              jwt_shaped),
    st.sampled_from(["Bearer " + "a" * 8100, "Bearer a.b.c", "Bearer ...", "Bearer e30.e30.", "Bearer  ",
                     'Bearer ", error="x']),
    st.binary(min_size=1, max_size=40).map(lambda b: b"Bearer " + bytes(c for c in b if c >= 0x80 or 0x20 <= c < 0x7F)),
)


class Target:
    """The gateway, its key server, and a session opened with a good token (every case pings on it)."""

    def __init__(self, client: Any, keys: KeyServer) -> None:
        self.client, self.keys = client, keys
        self.session: dict[str, str] = {}

    async def open(self) -> None:
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}
        async with self.client.post("/mcp", json=initialize, headers={
                "Accept": "application/json, text/event-stream",
                "Authorization": "Bearer " + self.keys.token(aud=RESOURCE)}) as resp:
            assert resp.status == 200, await resp.text()
            self.session = {"Mcp-Session-Id": resp.headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}


@pytest.fixture
async def target(make_gateway: Any, aiohttp_server: Any) -> AsyncIterator[Target]:
    keys = KeyServer()
    keys.add_key("k1")
    keys.issuer = str((await aiohttp_server(keys.app())).make_url("")).rstrip("/")
    client = await make_gateway(public_url="http://127.0.0.1:8808",
                                auth={"authorization_servers": [keys.issuer], "min_key_refresh_seconds": 3600})
    made = Target(client, keys)
    await made.open()
    yield made


ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def flipped(token: str, at: int, shift: int) -> str:
    """``token`` with one base64url character replaced by another. The last character of each part is left
    alone: its low bits may be padding that decoding ignores, so changing them can leave the same bytes."""
    spots = [i for i, c in enumerate(token) if c != "." and i + 1 < len(token) and token[i + 1] != "."]
    i = spots[at % len(spots)]
    new = ALPHABET[(ALPHABET.index(token[i]) + 1 + shift) % len(ALPHABET)]
    return token[:i] + new + token[i + 1:]


async def ask(target: Target, authorization: str | bytes) -> tuple[int, str, bytes, list[str] | None]:
    """(status, content type, body, challenges; None when the request went over a raw socket)."""
    base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json", **target.session}
    if isinstance(authorization, bytes) or any(ord(c) > 0x7E or ord(c) < 0x20 for c in authorization):
        raw = authorization if isinstance(authorization, bytes) else authorization.encode("utf-8", "replace")
        if b"\r" in raw or b"\n" in raw:
            raw = raw.replace(b"\r", b"").replace(b"\n", b"")
        status, content_type, body = await raw_request(target, "POST", {**base, "Authorization": raw}, PING)
        return status, content_type, body, None
    async with target.client.post("/mcp", data=PING, headers={**base, "Authorization": authorization}) as resp:
        return resp.status, resp.content_type, await resp.read(), resp.headers.getall("WWW-Authenticate", [])


@fuzz_settings(0.02)
@given(value=headers, at=st.integers(0, 10_000), bit=st.integers(0, 62), mutate=st.booleans())
async def test_any_authorization_header_gets_a_documented_answer(target: Target, value: Any, at: int, bit: int,
                                                                 mutate: bool) -> None:
    good = target.keys.token(aud=RESOURCE, scope="mcp:tools")
    header = "Bearer " + flipped(good, at, bit) if mutate else value
    status, content_type, body, challenges = await ask(target, header)
    check_answer(status, content_type, body, json.loads(PING))
    if status == 200 and (not isinstance(header, str) or header.partition(" ")[2] != good):
        raise AssertionError(f"accepted a header that is not the good token: {header!r:.200}")
    if status == 401 and challenges is not None:
        assert challenges and challenges[0].startswith("Bearer resource_metadata="), challenges
    status, _, body, _ = await ask(target, "Bearer " + good)
    assert status == 200 and json.loads(body)["result"] == {}, body[:200]
