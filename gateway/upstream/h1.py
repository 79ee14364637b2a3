"""The upstream hop's HTTP/1.1 client: a keep-alive connection pool over asyncio protocols, parsed by httptools.

Why not ``aiohttp.ClientSession``: its client costs more CPU per request than all of the gateway's own translation
work (docs/benchmarks.md "Where the time goes"); this pool does the same POST in a fraction of that. It does
only what the upstream hop needs:

- ``POST`` with a complete body (JSON-RPC messages are small and already encoded), one write per request;
- a response read whole (:meth:`H1Response.read`) or streamed as it arrives (:meth:`H1Response.chunks`, for SSE),
  with ``Content-Length``, chunked and read-until-close bodies (llhttp, via httptools, does the framing);
- a read timeout between arrivals (aiohttp's ``sock_read`` meaning: a long SSE stream lives as long as data
  flows), a connect timeout, and TLS when the URL is ``https``;
- two connection limits: one for requests and one for long-lived streams (``post(..., stream=True)``, the
  ``subscriptions/listen`` that stay open as long as their subscriber, 2026-07-28 basic/patterns §Subscriptions), so
  held-open streams can never take every connection ordinary requests need. Getting a connection (a free slot under the
  limit, then an idle or new connection) is bounded by the connect timeout as a whole: a full pool fails fast with
  :class:`PoolBusy` instead of queueing a request for ever;
- keep-alive: a connection whose response ended cleanly goes back to the pool; one closed early (the 2026 cancel is
  closing the response, 2026-07-28 basic/patterns §Cancellation) or broken is closed. Idle connections older than
  ``keepalive_seconds`` are not reused (a server closes idle ones; this keeps the race with that close small). POST is
  not idempotent, so a request that fails on a reused connection is not retried (as in aiohttp).

- interim (1xx) responses are skipped: the answer is the final response after them (RFC 9110 §15.2); a
  ``101`` is an error (nothing here asks to switch protocols);
- bounds on what an upstream can make the gateway hold: the status line and headers (``max_head_bytes``, interim
  responses included) and a body read whole (``max_body_bytes``; an SSE body is streamed, and its events are
  bounded by the decoder, ``adapters.sse.SseDecoder``). Over a bound the response fails with :class:`TooLarge`
  and its connection is closed.

A connection goes back to the pool only when its response was read to its end and nothing else arrived: a byte
after the end of the message (in the same packet, or later) means the upstream and this client disagree about
where responses end, and the next request on that connection could read another's answer.

No redirects, cookies, proxies or compression: an MCP endpoint URL is configured, not discovered, and the
gateway sends no ``Accept-Encoding``. Errors: :class:`Unreachable` (connect; :class:`PoolBusy`, a subclass, when
no slot came free), :class:`BrokenResponse` (closed early, malformed; :class:`TooLarge`, a subclass, over a
bound), ``TimeoutError`` (read), ``ValueError`` (a header that would break the framing).
"""

from __future__ import annotations

import asyncio
import collections
import ssl as ssl_module
from collections.abc import AsyncIterator, Mapping
from urllib.parse import SplitResult, urlsplit

import httptools

from gateway.errors import UpstreamHopError

HIGH_WATER = 1 << 20  # buffered body bytes at which reading pauses (a slow consumer of a fast stream)
LOW_WATER = HIGH_WATER // 4


class Unreachable(UpstreamHopError):
    """No connection could be made (refused, unresolvable, connect timeout)."""


class PoolBusy(Unreachable):
    """Every connection the limit allows was in use for the whole connect timeout."""


class BrokenResponse(UpstreamHopError):
    """The connection closed before the response ended, or the bytes were not HTTP/1.1."""


class TooLarge(BrokenResponse):
    """The response's head, or a body read whole, went past its configured bound."""


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Connection(asyncio.Protocol):
    """One TCP connection and the response in flight on it (at most one: no pipelining)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = self.in_use = False
        self.idle_since = 0.0
        self.lane: asyncio.Semaphore | None = None  # the limit whose slot the response in flight holds
        self.max_head = self.max_body = 0  # set by the pool (0: unbounded)
        self.begin()

    headers: dict[str, str]  # set by begin()

    def begin(self) -> None:
        self.status, self.headers, self.keep_alive, self.until_eof = 0, {}, False, False
        self.repeated: dict[str, list[str]] | None = None  # every value of a repeated header, in order
        self.head_done = self.done = self.paused = self.interim = False
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = self.received = 0
        self.head_bytes = self.head_size = 0  # the head's bytes as received (raw) and as parsed
        self.body_limit = 0
        self.waiter: asyncio.Future[None] | None = None
        self.error: Exception | None = None

    # --- asyncio protocol ---
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.in_use or self.done:  # nothing was asked: a server talking out of turn is not reused
            self.close()
            return
        if not self.head_done:  # counted raw too: llhttp holds a header value whole until it ends
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if not self.done:  # (once done, it is bytes after the message: on_message_begin stopped the parse)
                self._fail(self.error or BrokenResponse(f"malformed HTTP response: {exc}"))
            self.close()
            return
        if not self.head_done and self.max_head and self.head_bytes > self.max_head:
            self._too_large(f"the response head is over {self.max_head} bytes")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head_done and self.until_eof and not self.done and exc is None:
            self.done = True  # a body delimited by the close itself (no length, not chunked)
            self._wake()
        elif not self.done:
            self._fail(BrokenResponse("the connection closed before the response ended"))

    # --- httptools callbacks ---
    def on_message_begin(self) -> None:
        if self.done:  # a second message after ours: stop parsing here (data_received closes the connection)
            raise BrokenResponse("bytes after the end of the response")

    def on_status(self, reason: bytes) -> None:
        self.head_size += len(reason) + 15  # "HTTP/1.1 200 " and the CRLF

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head_done:
            return  # a chunked body's trailer: never lets the upstream change headers already acted on
        self.head_size += len(name) + len(value) + 4
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        old = self.headers.get(key)
        if old is None:
            self.headers[key] = text
            return
        # The comma-joined value for ordinary use (RFC 9110 §5.3); every value kept apart for the headers whose
        # values may themselves hold commas (WWW-Authenticate challenges).
        self.headers[key] = f"{old}, {text}"
        if self.repeated is None:
            self.repeated = {}
        self.repeated.setdefault(key, [old]).append(text)

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if self.max_head and self.head_size > self.max_head:
            self._too_large(f"the response head is over {self.max_head} bytes")
            return
        if status < 200:
            self._interim(status)
            return
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()
        self.until_eof = "content-length" not in self.headers and "chunked" not in self.headers.get(
            "transfer-encoding", "").lower()
        self._bound_body(status)
        if self.error is None:
            self.head_done = True
        self._wake()

    def _interim(self, status: int) -> None:
        """A 1xx: not the answer, which follows it on the same connection (RFC 9110 §15.2). Its head still
        counts against the head bound, so an endless run of them cannot hold the request for ever."""
        if status == 101:
            self._fail(BrokenResponse("the upstream switched protocols (HTTP 101) on a POST"))
            self.close()
            return
        self.interim = True
        self.headers, self.repeated = {}, None

    def _bound_body(self, status: int) -> None:
        """A body read whole is bounded; an event stream answering the request is not (a listen lasts for ever;
        the SSE decoder bounds each event instead)."""
        if not self.max_body or (status == 200 and self.headers.get("content-type", "").lower().startswith(
                "text/event-stream")):
            return
        self.body_limit = self.max_body
        length = self.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body:  # fail before any of it is buffered
            self._too_large(f"the response body is over {self.max_body} bytes")

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.body_limit:
            self.received += len(body)
            if self.received > self.body_limit:
                self._too_large(f"the response body is over {self.body_limit} bytes")
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.done = True
        self._wake()

    # --- used by the pool and the response ---
    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: Exception) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    def _too_large(self, detail: str) -> None:
        self._fail(TooLarge(detail))
        self.close()  # never pooled: the rest of the response is still coming

    async def progress(self, timeout: float) -> None:  # noqa: ASYNC109  (a loop timer on the waiter future)
        """Wait until anything happens on the response (or ``timeout`` seconds pass: TimeoutError)."""
        loop = asyncio.get_running_loop()
        self.waiter = waiter = loop.create_future()
        timer = loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self.waiter = None

    def take(self) -> bytes:
        chunk = self.chunks.popleft()
        self.buffered -= len(chunk)
        if self.paused and self.buffered < LOW_WATER and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return chunk

    @property
    def reusable(self) -> bool:
        return self.done and self.keep_alive and self.error is None and not self.closed

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class H1Response:
    """A response whose status line and headers have arrived. Use as an async context manager: leaving it
    returns the connection to the pool when the body was read to its end, and closes it otherwise."""

    __slots__ = ("_conn", "_pool", "_released", "_repeated", "headers", "status")

    def __init__(self, conn: _Connection, pool: H1Pool) -> None:
        self._conn, self._pool, self._released = conn, pool, False
        self.status: int = conn.status
        self._repeated = conn.repeated
        # Names lower-cased; a repeated header's values comma-joined (all of them, apart: :meth:`getall`).
        self.headers: dict[str, str] = conn.headers

    def getall(self, name: str) -> tuple[str, ...]:
        """Every value of the header ``name`` (lower-case), in the order received; empty when absent."""
        if self._repeated is not None and name in self._repeated:
            return tuple(self._repeated[name])
        value = self.headers.get(name)
        return () if value is None else (value,)

    def discard(self) -> None:
        """Close the connection instead of pooling it: the answer showed the upstream out of step with us."""
        if not self._released:
            self._conn.close()
            self.release()

    @property
    def content_type(self) -> str:
        """The media type without parameters, lower-cased (aiohttp's default when absent)."""
        value = self.headers.get("content-type")
        return value.split(";", 1)[0].strip().lower() if value else "application/octet-stream"

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (transfer framing removed); raises on a broken body or a read timeout."""
        conn = self._conn
        while True:
            while conn.chunks:
                yield conn.take()
            if conn.error is not None:
                raise conn.error
            if conn.done:
                return
            await conn.progress(self._pool.read_timeout)

    async def read(self) -> bytes:
        """The whole body. (Not via :meth:`chunks`: a small JSON answer has usually arrived whole already, and
        this is the gateway's hot path.)"""
        conn, parts = self._conn, []
        while True:
            while conn.chunks:
                parts.append(conn.take())
            if conn.error is not None:
                raise conn.error
            if conn.done:
                return parts[0] if len(parts) == 1 else b"".join(parts)
            await conn.progress(self._pool.read_timeout)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._pool.release(self._conn)

    async def __aenter__(self) -> H1Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


def _host_header(parts: SplitResult) -> str:
    """The URL's host and explicit port, never its userinfo (RFC 9110 §7.2); an IPv6 literal bracketed."""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return host if parts.port is None else f"{host}:{parts.port}"


class H1Pool:
    """Connections to one origin, shared by every request the gateway sends there."""

    def __init__(self, url: str, *, connect_timeout: float, read_timeout: float, limit: int = 100,
                 stream_limit: int = 1000, keepalive_seconds: float = 15.0,
                 ssl_context: ssl_module.SSLContext | None = None, max_head_bytes: int = 0,
                 max_body_bytes: int = 0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream URL must be http(s)://host[:port]/path, not {url!r}")
        self.host, self.port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.ssl = (ssl_context or ssl_module.create_default_context()) if parts.scheme == "https" else None
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.keepalive_seconds = keepalive_seconds
        self.max_head_bytes, self.max_body_bytes = max_head_bytes, max_body_bytes  # 0: unbounded
        self._prefix = f"POST {self.target} HTTP/1.1\r\nHost: {_host_header(parts)}\r\n"
        self._idle: list[_Connection] = []  # a stack: the most recently used connection is reused first
        self.limits = {"request": limit, "stream": stream_limit}  # 0: unlimited
        self._lanes = {kind: asyncio.Semaphore(n) if n > 0 else None for kind, n in self.limits.items()}
        self._all: set[_Connection] = set()

    def head(self, length: int, headers: Mapping[str, str]) -> bytes:
        lines = [self._prefix, f"Content-Length: {length}\r\n"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
                raise ValueError(f"header {name!r} would break the HTTP framing")
            lines.append(f"{name}: {value}\r\n")
        lines.append("\r\n")
        # A value decoded by the server with surrogateescape goes out as the very bytes that came in.
        return "".join(lines).encode("utf-8", "surrogateescape")

    async def post(self, body: bytes, headers: Mapping[str, str], *, stream: bool = False) -> H1Response:
        """Send one POST and wait for its status line and headers. ``stream``: the response is expected to stay
        open for long (a listen); it counts against the stream limit instead of the request limit."""
        head = self.head(len(body), headers)
        kind = "stream" if stream else "request"
        lane = self._lanes[kind]
        deadline = asyncio.get_running_loop().time() + self.connect_timeout
        if lane is not None:
            await self._acquire(lane, kind, deadline)
        conn = None
        try:
            conn = self._reuse() or await self._connect(deadline)
            conn.lane = lane
            conn.begin()
            conn.in_use = True
            assert conn.transport is not None
            conn.transport.write(head + body)
            while not conn.head_done:
                if conn.error is not None:
                    raise conn.error
                await conn.progress(self.read_timeout)
        except BaseException:
            if conn is not None:
                self._forget(conn)
            if lane is not None:
                lane.release()
            raise
        return H1Response(conn, self)

    async def _acquire(self, lane: asyncio.Semaphore, kind: str, deadline: float) -> None:
        if not lane.locked():
            await lane.acquire()  # a free slot: no timer on the hot path
            return
        try:
            async with asyncio.timeout_at(deadline):
                await lane.acquire()
        except TimeoutError as exc:
            raise PoolBusy(f"no free connection to {self.host}:{self.port} within {self.connect_timeout} s: "
                           f"all {self.limits[kind]} {kind} connections are in use") from exc

    def _reuse(self) -> _Connection | None:
        now = asyncio.get_running_loop().time()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < self.keepalive_seconds:
                return conn
            self._forget(conn)
        return None

    async def _connect(self, deadline: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(deadline):
                _transport, conn = await loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl)
        except TimeoutError as exc:
            raise Unreachable(f"no connection to {self.host}:{self.port} within {self.connect_timeout} s") from exc
        except OSError as exc:
            raise Unreachable(f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}") from exc
        conn.max_head, conn.max_body = self.max_head_bytes, self.max_body_bytes
        self._all.add(conn)
        return conn

    def release(self, conn: _Connection) -> None:
        """The response is over: keep the connection when its message ended cleanly, else close it."""
        conn.in_use = False
        if conn.reusable:
            conn.idle_since = now = asyncio.get_running_loop().time()
            while self._idle and now - self._idle[0].idle_since >= self.keepalive_seconds:
                self._forget(self._idle.pop(0))  # the oldest idle ones, which a stack would never reach
            self._idle.append(conn)
        else:
            self._forget(conn)
        lane, conn.lane = conn.lane, None
        if lane is not None:
            lane.release()

    def _forget(self, conn: _Connection) -> None:
        conn.close()
        self._all.discard(conn)

    @property
    def connections(self) -> int:
        """Open connections (in use or idle)."""
        return sum(1 for conn in self._all if not conn.closed)

    async def close(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports run their close callbacks
