"""The upstream transport seam: UpstreamClient runs over any object with the Transport methods, here an
in-memory fake with no socket at all, and maps its errors through the one failure mapping."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from adapters.bridge import UpstreamError, UpstreamResult
from adapters.jsonwire import dumps, loads
from adapters.upstream import SessionView, build_request
from gateway.upstream.client import UpstreamClient, UpstreamFailure
from gateway.upstream.h1 import Unreachable


class FakeResponse:
    def __init__(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.status, self._body, self.released = status, body, False
        self.headers = {"content-type": content_type}

    @property
    def content_type(self) -> str:
        return self.headers["content-type"]

    def getall(self, name: str) -> tuple[str, ...]:
        return (self.headers[name],) if name in self.headers else ()

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self._body

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        self.released = True

    def discard(self) -> None:
        self.released = True

    async def __aenter__(self) -> FakeResponse:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class FakeTransport:
    """Answers every POST with ``answer(request)``; records what was sent."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.sent, self.closed = answer, [], False

    async def post(self, body: bytes, headers: Mapping[str, str], *, stream: bool = False) -> FakeResponse:
        self.sent.append((loads(body), dict(headers), stream))
        return self.answer(loads(body))

    async def close(self) -> None:
        self.closed = True


def client(transport: FakeTransport) -> UpstreamClient:
    return UpstreamClient("http://upstream.invalid/mcp", connect_timeout=1, read_timeout=1, transport=transport)


def call() -> Any:
    return build_request("tools/list", {}, request_id="u1", view=SessionView({}))


async def test_a_call_runs_over_an_injected_transport() -> None:
    transport = FakeTransport(lambda req: FakeResponse(200, dumps(
        {"jsonrpc": "2.0", "id": req["id"], "result": {"tools": []}})))
    up = client(transport)
    assert await up.call(call(), lambda _m: None) == UpstreamResult({"tools": []})
    (body, headers, stream), = transport.sent
    assert body["method"] == "tools/list" and headers["Mcp-Method"] == "tools/list" and stream is False
    await up.close()
    assert transport.closed


async def test_an_error_answer_and_the_transports_failures_map_as_for_the_pool() -> None:
    error = {"code": -32602, "message": "bad"}
    up = client(FakeTransport(
        lambda req: FakeResponse(400, dumps({"jsonrpc": "2.0", "id": req["id"], "error": error}))))
    assert await up.call(call(), lambda _m: None) == UpstreamError(error)

    def refuse(_req: Any) -> FakeResponse:
        raise Unreachable("no route")
    with pytest.raises(UpstreamFailure) as failure:
        await client(FakeTransport(refuse)).call(call(), lambda _m: None)
    assert failure.value.error.data == {"upstream": "unreachable"}
