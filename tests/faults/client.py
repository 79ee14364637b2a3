"""The fault suite's legacy (2025-11-25) client and its ledger: every ``tools/call`` it sends ends as one
:class:`Record` judged answered / errored / lost / cross-wired.

The client misbehaves on request (``mode``): it vanishes mid-round, answers twice, answers late, or answers
with the wrong shape. Every request carries a unique nonce that a correct answer echoes, so an answer meant
for another request (or session) is caught as cross-wired rather than passing as a success.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.faults.faulty_upstream import HUGE_BYTES

LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
DEADLINE = 20.0  # well past every timeout the suite configures (procs.py): an answer later than this is a hang


@dataclass
class Record:
    scenario: str
    session: int
    nonce: str
    expected: str  # "answered" or the JSON-RPC error code expected, e.g. "-32603"
    outcome: str = "lost"  # answered | errored | lost | cross-wired
    detail: str = ""
    error: dict[str, Any] = field(default_factory=dict)
    status: int = 0  # the POST's HTTP status


class Lost(Exception):
    """The request got no answer: a 5xx, a stream that ended without the response, or no answer in time."""


class FaultClient:
    def __init__(self, url: str, index: int) -> None:
        self.url, self.index, self.next_id, self.session_id = url, index, 0, ""
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self.answer_statuses: list[tuple[str, int]] = []  # (scenario, status) of every answer POST

    async def close(self) -> None:
        await self.http.close()

    def headers(self, **extra: str) -> dict[str, str]:
        out = {"Accept": ACCEPT, "Content-Type": "application/json"}
        if self.session_id:
            out.update({"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": LEGACY})
        return {**out, **extra}

    async def initialize(self) -> aiohttp.ClientResponse:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {"sampling": {}},
            "clientInfo": {"name": f"faults-{self.index}", "version": "1"}}}
        resp = await self.http.post(self.url, json=init, headers=self.headers())
        await resp.read()
        if resp.status == 200 and "Mcp-Session-Id" in resp.headers:
            self.session_id = resp.headers["Mcp-Session-Id"]
            async with self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                      headers=self.headers()) as note:
                await note.read()
        return resp

    async def answer(self, scenario: str, ident: Any, result: Any) -> None:
        async with self.http.post(self.url, json={"jsonrpc": "2.0", "id": ident, "result": result},
                                  headers=self.headers()) as resp:
            await resp.read()
            self.answer_statuses.append((scenario, resp.status))

    async def call(self, record: Record, tool: str, mode: str = "normal") -> Record:
        """Send one ``tools/call`` and judge what comes back (within :data:`DEADLINE`)."""
        self.next_id += 1
        ident = self.next_id
        body = {"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                "params": {"name": tool, "arguments": {"nonce": record.nonce}}}
        try:
            async with asyncio.timeout(DEADLINE):
                message = await self._exchange(record, body, mode)
        except TimeoutError:
            record.detail = f"no answer within {DEADLINE} s (hang)"
            return record
        except Lost as exc:
            record.detail = str(exc)
            return record
        judge(record, ident, message, tool)
        return record

    async def _exchange(self, record: Record, body: dict[str, Any], mode: str) -> dict[str, Any]:
        headers: Any = self.headers()
        if mode == "two_session_ids":  # one header twice: ours, then a made-up one (which does the gateway use?)
            headers = [*headers.items(), ("Mcp-Session-Id", "0123456789abcdef-not-a-session")]
        resp = await self.http.post(self.url, json=body, headers=headers)
        record.status = resp.status
        async with resp:
            if resp.status >= 500:
                raise Lost(f"HTTP {resp.status}: {(await resp.text())[:200]}")
            if resp.content_type == "application/json":
                return json.loads(await resp.read())
            if resp.status != 200 or resp.content_type != "text/event-stream":
                raise Lost(f"HTTP {resp.status} {resp.content_type}: {(await resp.text())[:200]}")
            return await self._stream(record, body["id"], resp, mode)

    async def _stream(self, record: Record, ident: int, resp: aiohttp.ClientResponse, mode: str) -> dict[str, Any]:
        """Read the POST's SSE stream to the response, answering sampling requests as ``mode`` says."""
        pending: list[asyncio.Task[None]] = []
        try:
            async for event_id, message in events(resp):
                if message.get("id") == ident and ("result" in message or "error" in message):
                    await asyncio.gather(*pending)  # a late answer still gets its (judged) status
                    return message
                if message.get("method") != "sampling/createMessage":
                    continue
                if mode == "vanish":  # hang up while the bridge waits, then come back for the outcome
                    resp.close()
                    return await self._resume(ident, event_id)
                pending.append(asyncio.create_task(self._respond(record, message, mode)))
            raise Lost("the SSE stream ended without the response")
        finally:
            for task in pending:
                task.cancel()

    async def _respond(self, record: Record, message: dict[str, Any], mode: str) -> None:
        prompt = message["params"]["messages"][0]["content"]["text"]
        if prompt != f"nonce {record.nonce}":  # another request's sampling round on this request's stream
            record.detail = f"sampling request for {prompt!r} on the stream of {record.nonce}"
        answer: Any = {"role": "assistant", "model": "m", "content": {"type": "text", "text": f"S-{prompt[6:]}"}}
        if mode == "late":
            await asyncio.sleep(ANSWER_LATE)  # sleep: the client answers late, on purpose
        if mode == "shape_str":
            answer = "not an object"
        if mode == "shape_obj":
            answer = {"role": "assistant", "model": "m", "content": "flat text, not a content block"}
        await self.answer(record.scenario, message["id"], answer)
        if mode == "twice":
            await self.answer(record.scenario, message["id"], answer)

    async def _resume(self, ident: int, last_event_id: str | None) -> dict[str, Any]:
        headers = self.headers(Accept="text/event-stream",
                               **({"Last-Event-ID": last_event_id} if last_event_id else {}))
        async with self.http.get(self.url, headers=headers) as resp:
            if resp.status != 200:
                raise Lost(f"resume refused: HTTP {resp.status} {(await resp.text())[:200]}")
            async for _eid, message in events(resp):
                if message.get("id") == ident and ("result" in message or "error" in message):
                    return message
        raise Lost("the resumed stream ended without the response")


ANSWER_LATE = 3.0  # past the configured client answer timeout (procs.ANSWER_TIMEOUT)


async def sse_events(resp: aiohttp.ClientResponse):
    """(event id, message) for every SSE event, priming events (an id, no data: message None) included."""
    event_id, data = None, []
    async for raw in resp.content:
        line = raw.rstrip(b"\r\n")
        if line.startswith(b"id:"):
            event_id = line[3:].strip().decode()
        elif line.startswith(b"data:"):
            data.append(line[5:].strip())
        elif not line and (data or event_id is not None):
            payload, seen, data, event_id = b"".join(data), event_id, [], None
            yield seen, json.loads(payload) if payload else None


async def events(resp: aiohttp.ClientResponse):
    """(event id, message) for every SSE event that carries a message (priming events are skipped)."""
    async for event_id, message in sse_events(resp):
        if message is not None:
            yield event_id, message


def expected_text(tool: str, nonce: str) -> str:
    """What a correct answer to ``tool`` says (faulty_upstream.py): the nonce, after the sampled text's
    round trip for ``sample``, after 40 MB of padding for ``huge``."""
    if tool == "sample":
        return f"{nonce}|S-{nonce}"
    if tool == "huge":
        return "A" * HUGE_BYTES + nonce
    return nonce


def judge(record: Record, ident: int, message: dict[str, Any], tool: str) -> None:
    """Sort one final JSON-RPC message into answered / errored / cross-wired."""
    if record.detail:  # a sampling request of another request reached this stream
        record.outcome = "cross-wired"
        return
    if message.get("id") != ident:
        record.outcome, record.detail = "cross-wired", f"response id {message.get('id')!r}, sent {ident}"
        return
    if isinstance(message.get("error"), dict):
        error = message["error"]
        record.error = error
        clear = isinstance(error.get("code"), int) and isinstance(error.get("message"), str) and error["message"]
        record.outcome = "errored" if clear else "lost"
        record.detail = f"{error.get('code')} {str(error.get('message'))[:160]} data={error.get('data')}"
        return
    texts = [c.get("text", "") for c in message.get("result", {}).get("content", []) if isinstance(c, dict)]
    want = expected_text(tool, record.nonce)
    if texts == [want]:
        record.outcome = "answered"
    else:
        record.outcome = "cross-wired"
        record.detail = f"expected {want!r}, got {str(texts)[:160]!r} ({sum(map(len, texts))} chars)"
