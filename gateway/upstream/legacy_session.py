"""One 2025-11-25 session at a legacy upstream, as the reverse bridge's client of it
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): the ``initialize`` handshake, requests
whose answers (and the server's own requests on their SSE streams) arrive as messages on a queue, responses and
notifications POSTed back, the session's GET stream, and ``DELETE`` at the end (2025-11-25 basic/lifecycle,
basic/transports §Streamable HTTP).

Only performing lives here; what a message means is decided in ``adapters.reverse``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp

from adapters.jsonwire import dumps, loads
from adapters.reverse import reinitialize
from adapters.sse import EventTooLarge, SseDecoder
from gateway.errors import UpstreamHopError
from gateway.upstream.h1 import BrokenResponse, H1Pool, H1Response, Unreachable

log = logging.getLogger("gateway")
Message = dict[str, Any]
BROKE = "dev.legacy-gateway/broke"  # the key of the queue's last item when a stream ended without its answer
GONE = "dev.legacy-gateway/gone"  # the key of the queue's only item when the server no longer knows the session
_DRAIN_SECONDS = 1.0  # how long a request's stream may go on after its answer before its connection is dropped


class SessionGone(UpstreamHopError):
    """The server answered 404 for the session id: it ended the session (re-initialize)."""


class LegacyFailure(UpstreamHopError):
    """The server's answer was not usable (a status other than 2xx/404, not JSON-RPC, unreachable)."""


class LegacySession:
    """A session opened by :meth:`open`; ``on_unrelated`` gets each server request of the GET stream,
    ``on_notified`` each of its notifications, and None when it ended.

    ``streams`` (default: ``http``) carries what stays open while the server works or waits (a call's POST, the
    GET stream); ``http`` the short exchanges. Two connection pools, so that answers to parked calls never
    wait for a connection those very calls hold. ``authorize``: the upstream's credential (the ``Authorization``
    value, or None), asked before each request since a minted token is renewed; it raises
    :class:`LegacyFailure` when none can be had. ``refused``: the server answered 401 to that credential; it
    forgets a credential the gateway obtained and says whether to send the request once more with a fresh one
    (``adapters.credentials.after_refusal``), as the forward ``UpstreamClient.post`` does. ``posts``: the
    requests' and answers' POSTs go through that pool instead (gateway.upstream.h1: a fraction of aiohttp's client
    CPU, on the bridged call's critical path); ``initialize``, the GET stream and ``DELETE`` stay on aiohttp."""

    def __init__(self, http: aiohttp.ClientSession, url: str, max_event_bytes: int,
                 headers: Mapping[str, str] | None = None, streams: aiohttp.ClientSession | None = None,
                 authorize: Callable[[], Awaitable[str | None]] | None = None,
                 refused: Callable[[], bool] | None = None, posts: H1Pool | None = None) -> None:
        self.http, self.url, self.max_event_bytes = http, url, max_event_bytes
        self.posts = posts
        self.streams = streams or http
        self.extra = dict(headers or {})
        self.authorize, self.refused = authorize, refused
        self.session_id: str | None = None
        self.version = "2025-11-25"
        self.initialized: Mapping[str, Any] = {}
        self.ids = itertools.count(1)
        self.listener: asyncio.Task[None] | None = None
        self.on_unrelated: Callable[[Message], None] = lambda message: None
        self.on_notified: Callable[[Message | None], None] = lambda message: None

    def headers(self) -> dict[str, str]:
        out = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": self.version, **self.extra}
        if self.session_id is not None:
            out["Mcp-Session-Id"] = self.session_id
        return out

    async def sent_headers(self) -> dict[str, str]:
        """:meth:`headers` with the upstream's credential, when it has one."""
        out = self.headers()
        value = await self.authorize() if self.authorize is not None else None
        if value:
            out["Authorization"] = value
        return out

    async def _send(self, http: aiohttp.ClientSession, method: str,
                    data: bytes | None = None) -> aiohttp.ClientResponse:
        """One request with the upstream's credential; a 401 to a credential the gateway obtained is sent once more
        with a fresh one (``refused``), never more: a second 401 is the answer."""
        resp = await self._request(http, method, data)
        if resp.status == 401 and self.refused is not None and self.refused():
            async with resp:
                await resp.read()  # small, and read whole so the connection goes back to the pool
            resp = await self._request(http, method, data)
        return resp

    async def _post(self, http: aiohttp.ClientSession, data: bytes,
                    stream: bool) -> aiohttp.ClientResponse | H1Response:
        """A POST as :meth:`_send` sends it; through ``posts`` when there is that pool (``stream``: its stream lane,
        for a call's POST that stays open while the server works or waits), its failures aiohttp's."""
        if self.posts is None:
            return await self._send(http, "POST", data)
        resp = await self._h1(data, stream)
        if resp.status == 401 and self.refused is not None and self.refused():
            async with resp:
                await resp.read()  # small, and read whole so the connection goes back to the pool
            resp = await self._h1(data, stream)
        return resp

    async def _h1(self, data: bytes, stream: bool) -> H1Response:
        assert self.posts is not None
        headers = await self.sent_headers()
        try:
            return await self.posts.post(data, headers, stream=stream)
        except (Unreachable, BrokenResponse) as exc:
            raise aiohttp.ClientConnectionError(str(exc)) from exc

    async def _request(self, http: aiohttp.ClientSession, method: str, data: bytes | None) -> aiohttp.ClientResponse:
        headers = await self.sent_headers()
        if method != "GET":
            return await http.request(method, self.url, data=data, headers=headers)
        del headers["Content-Type"]
        headers["Accept"] = "text/event-stream"
        return await http.request(method, self.url, headers=headers, timeout=aiohttp.ClientTimeout())

    async def open(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """``initialize``, then ``notifications/initialized``, then the GET stream (a 405 means there is none)."""
        queue: asyncio.Queue[Message] = asyncio.Queue()
        ident = f"gw-init-{next(self.ids)}"
        body = dumps({"jsonrpc": "2.0", "id": ident, "method": "initialize", "params": dict(params)})
        async with await self._send(self.http, "POST", body) as resp:
            if resp.status != 200:
                raise LegacyFailure(f"initialize answered HTTP {resp.status}")
            self.session_id = resp.headers.get("mcp-session-id")
            await self._read(resp, queue, ident)
        answer = queue.get_nowait()
        result = answer.get("result")
        if not isinstance(result, Mapping) or not isinstance(result.get("protocolVersion"), str):
            raise LegacyFailure(f"initialize was not answered with a result: {answer.get('error')}")
        self.version, self.initialized = result["protocolVersion"], result
        await self.notify("notifications/initialized")
        self.listen()
        return result

    def listen(self) -> None:
        """(Re)open the GET stream when it is not open: a listen that wants it after it ended asks again."""
        if self.listener is None or self.listener.done():
            self.listener = asyncio.create_task(self._listen())

    def new_id(self) -> str:
        return f"gw-{next(self.ids)}"

    def request(self, message: Message) -> tuple[asyncio.Queue[Message], asyncio.Task[None]]:
        """POST a request; its messages (server requests and notifications, then its answer) arrive on the
        returned queue, read by the returned task, which ends with the answer (once the stream after it ended, at
        most ``_DRAIN_SECONDS`` later: cancelled then, it drops the connection instead), or with ``GONE`` (a 404: the
        session ended, the request was not taken) or ``BROKE`` (no answer will come). Nothing here waits: a server
        may send its answer's headers only with its first event, and the caller must notice its client's hang-up."""
        queue: asyncio.Queue[Message] = asyncio.Queue()
        return queue, asyncio.create_task(self._exchange(message, queue, self.streams, stream=True))

    async def _exchange(self, message: Message, queue: asyncio.Queue[Message], http: aiohttp.ClientSession,
                        drain: bool = True, stream: bool = False) -> None:
        """``drain``: after the answer, wait for the stream's end (:func:`_drained`); the caller awaits that."""
        try:
            async with await self._post(http, dumps(message), stream) as resp:
                if reinitialize(resp.status):
                    queue.put_nowait({GONE: True})
                elif resp.status != 200:
                    queue.put_nowait({BROKE: f"the upstream answered HTTP {resp.status}"})
                elif not await self._read(resp, queue, message["id"]):
                    queue.put_nowait({BROKE: "the upstream stream ended before its answer"})
                elif drain:
                    await _drained(resp)
        except LegacyFailure as exc:  # no credential for the upstream
            queue.put_nowait({BROKE: str(exc)})
        except (aiohttp.ClientError, EventTooLarge, ValueError, TimeoutError, BrokenResponse) as exc:
            queue.put_nowait({BROKE: f"the upstream stream broke ({type(exc).__name__})"})

    async def _read(self, resp: aiohttp.ClientResponse | H1Response, queue: asyncio.Queue[Message],
                    ident: Any) -> bool:
        """Every message of a JSON or SSE answer onto ``queue``; True once the answer to ``ident`` came."""
        if resp.content_type != "text/event-stream":
            message = loads(await resp.read())
            queue.put_nowait(message)
            return isinstance(message, dict) and message.get("id") == ident
        decoder = SseDecoder(self.max_event_bytes)
        async for chunk in resp.chunks() if isinstance(resp, H1Response) else resp.content.iter_any():
            for data in decoder.feed(chunk):
                message = loads(data) if data.strip() else None
                if not isinstance(message, dict):
                    continue  # a priming event (2025-11-25 basic/transports): no message
                queue.put_nowait(message)
                if message.get("id") == ident and "method" not in message:
                    return True
        return False

    async def _listen(self) -> None:
        """The session's GET stream (2025-11-25 basic/transports §Listening for Messages from the Server)."""
        try:
            async with await self._send(self.streams, "GET") as resp:
                if resp.status != 200:
                    return  # 405: the server offers no GET stream
                decoder = SseDecoder(self.max_event_bytes)
                async for chunk in resp.content.iter_any():
                    for data in decoder.feed(chunk):
                        message = loads(data) if data.strip() else None
                        if isinstance(message, dict) and "method" in message:
                            (self.on_unrelated if "id" in message else self.on_notified)(message)
        except (aiohttp.ClientError, EventTooLarge, ValueError, LegacyFailure) as exc:
            log.info("legacy upstream %s: the session's GET stream ended (%s)", self.url, exc)
        finally:
            self.on_notified(None)

    async def call(self, method: str, params: Mapping[str, Any]) -> Message:
        """A request of the gateway's own (``resources/subscribe``, ``logging/setLevel``): its answer message.
        Raises :class:`SessionGone` (404) or :class:`LegacyFailure` (no answer)."""
        ident = self.new_id()
        queue: asyncio.Queue[Message] = asyncio.Queue()
        await self._exchange({"jsonrpc": "2.0", "id": ident, "method": method, "params": dict(params)}, queue,
                             self.http, drain=False)  # its answer is awaited: no wait for the stream's end
        while not queue.empty():
            message = queue.get_nowait()
            if GONE in message:
                raise SessionGone(self.url)
            if BROKE in message:
                raise LegacyFailure(str(message[BROKE]))
            if message.get("id") == ident and "method" not in message:
                return message
        raise LegacyFailure(f"{method} was not answered")

    async def post(self, message: Message) -> None:
        """A response or notification: 202 expected; 404: the session is gone."""
        async with await self._post(self.http, dumps(message), False) as resp:
            if reinitialize(resp.status):
                raise SessionGone(self.url)
            if resp.status >= 300:
                raise LegacyFailure(f"the upstream answered HTTP {resp.status} to a {_what(message)}")

    async def respond(self, ident: Any, result: Any = None, error: Mapping[str, Any] | None = None) -> None:
        body: Message = {"jsonrpc": "2.0", "id": ident}
        body.update({"error": dict(error)} if error is not None else {"result": result})
        await self.post(body)

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        await self.post({"jsonrpc": "2.0", "method": method, **({"params": dict(params)} if params else {})})

    async def close(self) -> None:
        """The GET stream stops and the session ends (``DELETE``; a 405 refusal is fine)."""
        if self.listener is not None:
            self.listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.listener
        if self.session_id is None:
            return
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, LegacyFailure):
            async with await self._send(self.http, "DELETE"):
                pass


async def _drained(resp: aiohttp.ClientResponse | H1Response) -> None:
    """The rest of an SSE answer after its JSON-RPC answer, so that its connection goes back to the pool: a server
    SHOULD end the stream once it has answered (2025-11-25 basic/transports, Sending Messages to the Server), but its
    last chunk often comes a moment after the answer's event, and a response left before its end closes its
    connection (the next call would open another). A server that keeps it open longer loses the connection."""
    if isinstance(resp, H1Response):
        with contextlib.suppress(BrokenResponse, TimeoutError):
            async with asyncio.timeout(_DRAIN_SECONDS):
                async for _ in resp.chunks():
                    pass
        return
    if resp.content.at_eof():
        return
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
        async with asyncio.timeout(_DRAIN_SECONDS):
            while await resp.content.readany():
                pass


def _what(message: Message) -> str:
    return "response" if "method" not in message else str(message["method"])
