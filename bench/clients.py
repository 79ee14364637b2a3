"""Minimal load-generating clients: a 2026-07-28 client and a 2025-11-25 session client.

They are deliberately small (raw aiohttp, one keep-alive connection pool) so the numbers measure the servers,
not a client library. The legacy client answers server-initiated requests on the POST's SSE stream at once,
which is what makes the ``bridged`` scenario measure the gateway's own per-round overhead.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp

MODERN, LEGACY = "2026-07-28", "2025-11-25"
ACCEPT = "application/json, text/event-stream"
PICK = json.dumps(["README.md", "src/app/core.py", "docs/architecture.md"])


TONE = {"action": "accept", "content": {"tone": "terse"}}  # the one round of draft_note, answered at once


def _meta() -> dict[str, Any]:
    return {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}, "elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "bench-modern", "version": "1"}}


class ModernClient:
    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url, self.next_id = http, url, 0

    async def _call(self, name: str, params: dict[str, Any], method: str = "tools/call") -> bytes:
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": _meta()}}
        headers = {"Accept": ACCEPT, "Content-Type": "application/json", "MCP-Protocol-Version": MODERN,
                   "Mcp-Method": method, "Mcp-Name": name}
        async with self.http.post(self.url, data=json.dumps(body), headers=headers) as resp:
            answer = await resp.read()
        if resp.status != 200 or b'"result"' not in answer:
            raise RuntimeError(f"modern {name} failed: {resp.status} {answer[:200]!r}")
        return answer

    async def echo(self) -> None:
        await self._call("echo", {"name": "echo", "arguments": {"text": "hi"}})

    async def summarize(self) -> None:
        """``summarize_repo`` with the MRTR rounds done by this client itself (2026-07-28 basic/patterns/mrtr):
        each ``input_required`` is answered at once and retried with a new id. Through the gateway, the same
        rounds become live sampling requests; the difference is the gateway's own cost per round."""
        params: dict[str, Any] = {"name": "summarize_repo", "arguments": {"repo": "bench"}}
        for _round in range(10):
            result = json.loads(await self._call("summarize_repo", params))["result"]
            if result.get("resultType") != "input_required":
                if result.get("isError"):
                    raise RuntimeError(f"summarize_repo failed: {result}")
                return
            answers = {key: _sample_answer(entry["params"]) for key, entry in result["inputRequests"].items()}
            params = {"name": "summarize_repo", "arguments": {"repo": "bench"}, "inputResponses": answers,
                      "requestState": result["requestState"]}
        raise RuntimeError("summarize_repo did not complete in 10 rounds")


    async def ask(self, name: str, arguments: dict[str, Any]) -> None:
        """A tool whose every ``input_required`` round is sampling, answered at once and retried (the reverse
        bridge's scenario: the gateway turns a 2025 server's live sampling request into that round)."""
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        for _round in range(10):
            result = json.loads(await self._call(name, params))["result"]
            if result.get("resultType") != "input_required":
                if result.get("isError"):
                    raise RuntimeError(f"{name} failed: {result}")
                return
            answers = {key: _sample_answer(entry["params"]) for key, entry in result["inputRequests"].items()}
            params = {"name": name, "arguments": arguments, "inputResponses": answers,
                      "requestState": result["requestState"]}
        raise RuntimeError(f"{name} did not complete in 10 rounds")

    async def draft(self) -> None:
        """``prompts/get draft_note``: one MRTR round (a form elicitation for the tone), done by this client."""
        params: dict[str, Any] = {"name": "draft_note", "arguments": {"topic": "bench"}}
        result = json.loads(await self._call("draft_note", params, "prompts/get"))["result"]
        if result.get("resultType") != "input_required":
            raise RuntimeError(f"draft_note asked nothing: {result}")
        params |= {"inputResponses": {key: TONE for key in result["inputRequests"]},
                   "requestState": result["requestState"]}
        result = json.loads(await self._call("draft_note", params, "prompts/get"))["result"]
        if "messages" not in result:
            raise RuntimeError(f"draft_note failed: {result}")


def _sample_answer(params: dict[str, Any]) -> dict[str, Any]:
    prompt = params["messages"][0]["content"]["text"]
    text = PICK if "JSON array" in prompt else "A summary."
    return {"role": "assistant", "content": {"type": "text", "text": text}, "model": "bench", "stopReason": "endTurn"}


class LegacyClient:
    """One 2025-11-25 session: initialize once, then call tools with the session header."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url, self.next_id, self.session_id = http, url, 0, ""

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        if self.session_id:
            headers.update({"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": LEGACY})
        return headers

    async def _post(self, message: dict[str, Any]) -> aiohttp.ClientResponse:
        return await self.http.post(self.url, data=json.dumps(message), headers=self._headers())

    async def start(self) -> None:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {"sampling": {}, "elicitation": {}},
            "clientInfo": {"name": "bench-legacy", "version": "1"}}}
        async with await self._post(init) as resp:
            await resp.read()
            self.session_id = resp.headers["Mcp-Session-Id"]
        async with await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}) as resp:
            await resp.read()

    async def call(self, name: str, arguments: dict[str, Any]) -> bool:
        """True when the call succeeded. A JSON answer is checked as ModernClient checks its own (read, then a
        byte search, not parsed), so both eras' scenarios pay the same client-side cost for the same answer."""
        return await self._request("tools/call", name, arguments, b'"result"',
                                   lambda r: "result" in r and not r["result"].get("isError"))

    async def prompt(self, name: str, arguments: dict[str, Any]) -> bool:
        """``prompts/get``: True when it returned messages (through the gateway, draft_note's round is a live
        ``elicitation/create``, answered at once on the way)."""
        return await self._request("prompts/get", name, arguments, b'"messages"',
                                   lambda r: "messages" in (r.get("result") or {}))

    async def _request(self, method: str, name: str, arguments: dict[str, Any], needle: bytes,
                       succeeded: Callable[[dict[str, Any]], bool]) -> bool:
        """One request by name; its JSON answer judged by a byte search for ``needle`` (and no ``isError``), its
        SSE answer's final message by ``succeeded`` once every request on the way was answered."""
        self.next_id += 1
        ident = self.next_id
        message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": {"name": name, "arguments": arguments}}
        async with await self._post(message) as resp:
            if resp.content_type == "application/json":
                answer = await resp.read()
                return resp.status == 200 and needle in answer and b'"isError"' not in answer
            return succeeded(await self._drain(resp, ident))

    async def _drain(self, resp: aiohttp.ClientResponse, ident: int,
                     sample: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
        """The response to ``ident``, answering each sampling request with ``sample(params)`` on the way (the
        load check passes its own, to put a per-call nonce in the answer). An answer is POSTed while the stream
        goes on being read, as the official SDKs' clients do (the Python SDK's writer sends it while the call's
        stream is read by another task), so its ``202`` is not on the call's path; every answer's ``202`` is
        awaited before the call counts as done."""
        sample = sample or _sample_answer
        data: list[bytes] = []
        posted: list[asyncio.Task[None]] = []
        try:
            async for line in resp.content:
                if line.startswith(b"data:"):
                    data.append(line[5:].strip())
                elif line in (b"\n", b"\r\n") and data:
                    payload, data = b"".join(data), []
                    if not payload:  # a priming event (2025-11-25 §Streamable HTTP) carries only an id
                        continue
                    message = json.loads(payload)
                    if message.get("id") == ident and ("result" in message or "error" in message):
                        await asyncio.gather(*posted)
                        return message
                    method = message.get("method")
                    if method in ("sampling/createMessage", "elicitation/create"):
                        result = sample(message["params"]) if method == "sampling/createMessage" else TONE
                        answer = {"jsonrpc": "2.0", "id": message["id"], "result": result}
                        posted.append(asyncio.create_task(self._post_answer(answer)))
            raise RuntimeError("the SSE stream ended without a response")
        finally:
            for task in posted:
                task.cancel()

    async def _post_answer(self, message: dict[str, Any]) -> None:
        async with await self._post(message) as resp:
            await resp.read()
            if resp.status != 202:  # 2025-11-25 basic/transports: an accepted response gets 202 Accepted
                raise RuntimeError(f"an answer got {resp.status}, not 202")

    async def open_get_stream(self) -> aiohttp.ClientResponse:
        resp = await self.http.get(self.url, headers={**self._headers(), "Accept": "text/event-stream"})
        if resp.status != 200:
            raise RuntimeError(f"GET stream refused: {resp.status}")
        return resp
