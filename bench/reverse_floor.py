"""A bare aiohttp reverse bridge for one sampling tool: the floor for a Python reverse bridge on this machine.

``python -m bench.reverse_floor --port P --upstream URL``. It opens one 2025-11-25 session with the server at
start-up. A 2026-07-28 ``tools/call`` is POSTed on it; the first server request on the call's SSE stream is given to
the client as an ``input_required`` round, the stream parked under a counter that serves as the ``requestState``;
the retry's answer is POSTed back and the parked stream read to its result. No validation, no sealing, no session
pool, no usage records, no cancellation: the same HTTP exchanges as the reverse bridge (two with the client, two
with the server) and nothing else, which is what ``bench.reverse``'s ``reverse_floor`` scenario measures.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from bench.forwarder import UPSTREAM, serve

LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


class Legacy:
    """The one upstream session, and the calls parked on a server request: their event readers by state."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url, self.headers = http, url, {"Accept": ACCEPT, "Content-Type": "application/json"}
        self.ids, self.states = itertools.count(1), itertools.count(1)
        self.parked: dict[str, tuple[AsyncIterator[dict[str, Any]], Any, aiohttp.ClientResponse]] = {}

    async def open(self) -> None:
        params = {"protocolVersion": LEGACY, "capabilities": {"sampling": {}},
                  "clientInfo": {"name": "reverse-floor", "version": "1"}}
        async with self.http.post(self.url, json=self._request("initialize", params), headers=self.headers) as r:
            self.headers |= {"Mcp-Session-Id": r.headers["Mcp-Session-Id"], "MCP-Protocol-Version": LEGACY}
            await r.read()
        async with self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                  headers=self.headers) as r:
            await r.read()

    def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}

    async def call(self, params: dict[str, Any]) -> dict[str, Any]:
        """The call's result, or its first server request as an ``input_required`` round."""
        kept = {k: v for k, v in params.items() if k not in ("_meta", "inputResponses", "requestState")}
        response = await self.http.post(self.url, json=self._request("tools/call", kept), headers=self.headers)
        return await self._until_asked(_events(response), response)

    async def retry(self, params: dict[str, Any]) -> dict[str, Any]:
        events, asked, response = self.parked.pop(params["requestState"])
        answer = {"jsonrpc": "2.0", "id": asked, "result": next(iter(params["inputResponses"].values()))}
        async with self.http.post(self.url, json=answer, headers=self.headers) as r:
            await r.read()
        return await self._until_asked(events, response)

    async def _until_asked(self, events: AsyncIterator[dict[str, Any]],
                           response: aiohttp.ClientResponse) -> dict[str, Any]:
        async for message in events:
            if "method" in message and "id" in message:  # the server asks its client: one round
                state = str(next(self.states))
                self.parked[state] = (events, message["id"], response)
                request = {"method": message["method"], "params": message.get("params", {})}
                return {"resultType": "input_required", "inputRequests": {"r1": request}, "requestState": state}
            if "result" in message:
                response.release()
                return dict(message["result"])
        raise RuntimeError("the server's stream ended without a result")


SESSION = web.AppKey("session", Legacy)


async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The JSON messages of an SSE stream (one ``data:`` line per event, as the 1.x SDK writes them)."""
    async for line in response.content:
        if line.startswith(b"data:"):
            yield json.loads(line[5:])


async def handle(request: web.Request) -> web.Response:
    message = await request.json()
    params, legacy = message["params"], request.app[SESSION]
    result = await (legacy.retry(params) if "requestState" in params else legacy.call(params))
    return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})


async def _session(app: web.Application) -> AsyncIterator[None]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        app[SESSION] = Legacy(http, app[UPSTREAM])
        await app[SESSION].open()
        yield


def main() -> None:
    serve(handle, _session)


if __name__ == "__main__":
    main()
