"""``RedisWire``: one pipelined connection to Redis, shared by every task of the process, for the session store's
commands (docs/design/replicas.md#one-pipelined-redis-connection-per-process).

redis-py's asyncio client takes a pooled connection per command and waits for its reply before giving it back,
which makes each command cost the gateway several times what the command itself needs (docs/benchmarks.md,
"The Redis store, and two workers"). Here every command goes to one socket and the replies
are matched to their callers in order (RESP replies come back in the order the commands were sent): a command
alone on the connection is written at once, and those issued while replies are awaited leave together at the
loop's next turn, so a command costs about half as much at one request at a time, and one write and one read
serve many commands under load. The RESP encoding and parsing are hiredis's (the Redis project's C library, which
redis-py itself uses for parsing when it is installed).

Only what can share a connection goes here: plain commands, ``MULTI``/``EXEC`` blocks (written in one piece, so no
other task's command can fall between them) and scripts (``EVALSHA``, with ``EVAL`` when Redis does not know the
script yet). A pub/sub subscription (:class:`Subscriber`, :meth:`RedisWire.subscribe`) is a connection of its own
made the same way; blocking reads (``XREAD BLOCK``) keep redis-py connections of their own.

Failure: an error reply, a refused or lost connection, or a reply not back within ``timeout_seconds`` raises
:class:`~gateway.session.store.StoreUnavailable`. A timeout closes the connection (the replies after it could no
longer be matched), which fails every command waiting on it; the next command connects again. A command is
written again on a new connection only when the one it was about to use had already closed (a Redis restart
noticed before the write), never once written: Redis may have run it.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis

from gateway.session.store import StoreUnavailable

Arg = str | bytes | int | float
Command = Sequence[Arg]
DEFAULT_PORT: Final = 6379
# hiredis's stub types its argument as a one-element tuple; it takes any number of arguments.
_pack = cast(Callable[[tuple[Arg, ...]], bytes], hiredis.pack_command)


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how to connect, from a ``redis://``, ``rediss://`` or ``unix://`` URL (redis-py's forms)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    path: str | None = None  # a Unix socket
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False

    @classmethod
    def from_url(cls, url: str) -> Target:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        db_text = query.get("db", [parts.path.lstrip("/") if parts.scheme != "unix" else ""])[0] or "0"
        if parts.scheme not in ("redis", "rediss", "unix") or not db_text.isdigit():
            raise ValueError(f"not a Redis URL: {url!r} (redis://HOST:PORT/DB, rediss://… or unix://PATH)")
        db = int(db_text)
        username = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else None
        if parts.scheme == "unix":
            return cls(path=parts.path, db=db, username=username, password=password)
        return cls(host=parts.hostname or "127.0.0.1", port=parts.port or DEFAULT_PORT, db=db, username=username,
                   password=password, tls=parts.scheme == "rediss")

    def handshake(self) -> list[Command]:
        """What a new connection sends before any command: its credentials and its database."""
        commands: list[Command] = []
        if self.password is not None:
            commands.append(("AUTH", self.username, self.password) if self.username else ("AUTH", self.password))
        if self.db:
            commands.append(("SELECT", self.db))
        return commands


class Script:
    """A Lua script known by its SHA-1, as ``EVALSHA`` names it."""

    __slots__ = ("sha", "text")

    def __init__(self, text: str) -> None:
        self.text, self.sha = text, hashlib.sha1(text.encode()).hexdigest()


class _Connection(asyncio.Protocol):
    """One socket: replies are handed to the waiting futures in the order their commands were written."""

    def __init__(self, timeout: float) -> None:
        self._reader = hiredis.Reader()
        self._waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._timeout = timeout
        self._watchdog: asyncio.TimerHandle | None = None
        self._unsent: list[bytes] | None = None  # commands held for one write at the loop's next turn
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports (``serve --loop uvloop``) are not asyncio.Transport
        # subclasses. uvloop also calls this only after create_connection has returned, so RedisWire._open sets
        # the transport first, from what create_connection returned.
        self.transport = cast(asyncio.Transport, transport)

    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def send(self, commands: Sequence[Command]) -> list[asyncio.Future[Any]]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        futures = [loop.create_future() for _ in commands]
        data = b"".join(_pack(tuple(command)) for command in commands)
        if self._unsent is not None:
            self._unsent.append(data)
        elif self._waiting:
            # Others' replies are still to come, so the process is busy: this command waits for the loop's next
            # turn, where every command issued meanwhile leaves in one write (one send where there were many, at
            # concurrency). Alone on the connection it is written at once: one request at a time pays no turn.
            self._unsent = [data]
            loop.call_soon(self._write_unsent)
        else:
            self.transport.write(data)
        self._waiting.extend((future, deadline) for future in futures)
        if self._watchdog is None:
            self._watchdog = loop.call_at(deadline, self._check_deadline)
        return futures

    def _write_unsent(self) -> None:
        unsent, self._unsent = self._unsent, None
        if unsent and not self.closed and self.transport is not None:
            self.transport.write(b"".join(unsent))

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            future, _deadline = self._waiting.popleft()
            if not future.done():  # a caller that was cancelled meanwhile: its reply is dropped, in its place
                future.set_result(reply)
        # The watchdog stays armed when nothing waits: it then fires once, finds nothing and stops. Cancelling it
        # here and arming it again with the next command cost two timer operations per command at one request
        # at a time; an armed watchdog is never later than the oldest waiting command's deadline.

    def _check_deadline(self) -> None:
        self._watchdog = None
        if not self._waiting:
            return
        deadline = self._waiting[0][1]
        if asyncio.get_running_loop().time() >= deadline:
            self._fail(f"no reply within {self._timeout:g} s")
        else:
            self._watchdog = asyncio.get_running_loop().call_at(deadline, self._check_deadline)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"connection lost: {exc}" if exc else "connection closed by Redis")

    def _fail(self, why: str) -> None:
        self.closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        waiting, self._waiting = self._waiting, deque()
        for future, _deadline in waiting:
            if not future.done():
                future.set_exception(StoreUnavailable(f"the session store (Redis) failed: {why}"))
        if self.transport is not None:
            self.transport.abort()


class RedisWire:
    """The shared connection: made on first use, made again after it is lost."""

    def __init__(self, url: str, *, timeout_seconds: float) -> None:
        self.target = Target.from_url(url)
        self._timeout = timeout_seconds
        self._conn: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None

    async def call(self, *command: Arg) -> Any:
        """One command's reply."""
        (future,) = await self._send([command])
        return _checked(await future)

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        """Several commands written at once, not atomic; their replies."""
        futures = await self._send(commands)
        return [_checked(await future) for future in futures]

    async def transaction(self, commands: Sequence[Command]) -> list[Any]:
        """``MULTI`` … ``EXEC`` in one write: the replies of ``commands``, run atomically."""
        futures = await self._send([("MULTI",), *commands, ("EXEC",)])
        queued = [await future for future in futures[:-1]]
        replies = await futures[-1]
        for reply in queued:
            _checked(reply)  # an error here (a malformed command) made Redis discard the block: EXECABORT
        if not isinstance(replies, list):
            raise StoreUnavailable(f"the session store (Redis) failed: a transaction was not run ({replies!r})")
        return [_checked(reply) for reply in replies]

    async def script(self, script: Script, args: Sequence[Arg]) -> Any:
        """Run ``script`` with no keys and ``args`` (``EVALSHA``; ``EVAL`` once when Redis lacks it, after a
        restart or ``SCRIPT FLUSH``, which also makes it known for the next call)."""
        (future,) = await self._send([("EVALSHA", script.sha, 0, *args)])
        reply = await future
        if isinstance(reply, hiredis.ReplyError) and str(reply).startswith("NOSCRIPT"):
            (future,) = await self._send([("EVAL", script.text, 0, *args)])
            reply = await future
        return _checked(reply)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.transport is not None:
            conn.transport.close()

    async def _send(self, commands: Sequence[Command]) -> list[asyncio.Future[Any]]:
        conn = self._conn
        if conn is None or not conn.usable():
            conn = await self._connect()
        return conn.send(commands)

    async def _connect(self) -> _Connection:
        if self._connecting is not None:  # one connection attempt at a time; every caller waits for it
            return await asyncio.shield(self._connecting)
        self._connecting = connecting = asyncio.get_running_loop().create_future()
        try:
            conn = await self._open()
        except BaseException as exc:
            # The others waiting get the store's error, never this task's own cancellation.
            connecting.set_exception(exc if isinstance(exc, StoreUnavailable) else
                                     StoreUnavailable(f"the session store (Redis) failed: cannot connect: {exc!r}"))
            connecting.exception()  # retrieved: nobody else may be waiting for it
            raise
        else:
            self._conn = conn
            connecting.set_result(conn)
            return conn
        finally:
            self._connecting = None

    async def subscribe(self, channels: Sequence[str], name: str = "") -> Subscriber:
        """A connection of its own subscribed to ``channels`` (a subscribed connection takes no other command),
        once Redis confirmed every subscription; ``name``: its ``CLIENT SETNAME``, what ``CLIENT LIST`` shows."""
        handshake = [*self.target.handshake(), *([("CLIENT", "SETNAME", name)] if name else [])]
        subscriber = await _connect(self.target, self._timeout, lambda: Subscriber(handshake))
        try:
            async with asyncio.timeout(self._timeout):
                await subscriber.subscribe(channels)
        except TimeoutError as exc:
            subscriber.close()
            raise StoreUnavailable("the session store (Redis) failed: no reply to SUBSCRIBE") from exc
        except BaseException:
            subscriber.close()
            raise
        return subscriber

    async def _open(self) -> _Connection:
        conn = await _connect(self.target, self._timeout, lambda: _Connection(self._timeout))
        handshake = self.target.handshake()
        try:
            for future in conn.send(handshake) if handshake else []:
                _checked(await future)
        except BaseException:
            conn.connection_lost(None)  # refused credentials or database: this connection is not used
            raise
        return conn


_P = TypeVar("_P", _Connection, "Subscriber")


async def _connect(target: Target, seconds: float, factory: Callable[[], _P]) -> _P:
    """A connected protocol from ``factory`` (its transport set, also on uvloop), or StoreUnavailable."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(seconds):
            if target.path is not None:
                transport, conn = await loop.create_unix_connection(factory, target.path)
            else:
                transport, conn = await loop.create_connection(
                    factory, target.host, target.port, ssl=ssl.create_default_context() if target.tls else None)
    except (OSError, TimeoutError) as exc:
        raise StoreUnavailable(f"the session store (Redis) failed: cannot connect: {exc}") from exc
    if conn.transport is None:  # uvloop: connection_made is still to come
        conn.connection_made(transport)
    return conn


class Subscriber(asyncio.Protocol):
    """A pub/sub connection (RESP2): its handshake's replies and the subscriptions' confirmations, then the data of
    every ``message`` push, in order (:meth:`messages`). redis-py's pub/sub client took about twice the CPU per
    message (its reads go through a stream reader, locks and timeouts); a message here is one ``data_received``
    and one wake of the reading task. There is no read timeout: a subscribed connection is silent while nothing is
    published. TCP keepalive is on, so a peer gone without a word is noticed by the kernel in the end; Redis
    closing the connection (a restart) ends :meth:`messages` with StoreUnavailable at once."""

    def __init__(self, handshake: list[Command]) -> None:
        self._reader = hiredis.Reader()
        self._handshake = handshake
        self._before = len(handshake)  # replies still due before the first message
        self._inbox: deque[bytes] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._confirmed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._failure: StoreUnavailable | None = None
        self._closed = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # not an isinstance check: uvloop's are not
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)

    async def subscribe(self, channels: Sequence[str]) -> None:
        assert self.transport is not None
        self._before += len(channels)  # one confirmation per channel
        commands = [*self._handshake, ("SUBSCRIBE", *channels)]
        self.transport.write(b"".join(_pack(tuple(command)) for command in commands))
        await self._confirmed

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        try:
            while (reply := self._reader.gets()) is not False:
                self._take(reply)
        except hiredis.ProtocolError as exc:
            self._fail(f"unreadable reply: {exc}")
        if self._inbox:
            self._wake()

    def _take(self, reply: Any) -> None:
        if isinstance(reply, hiredis.ReplyError):
            self._fail(str(reply))
        elif self._before:
            self._before -= 1
            if not self._before and not self._confirmed.done():
                self._confirmed.set_result(None)
        elif isinstance(reply, list) and len(reply) == 3 and reply[0] == b"message":
            self._inbox.append(reply[2])

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"connection lost: {exc}" if exc else "connection closed by Redis")

    def _fail(self, why: str) -> None:
        if self._failure is None and not self._closed:
            self._failure = StoreUnavailable(f"the session store (Redis) failed: {why}")
            if not self._confirmed.done():
                self._confirmed.set_exception(self._failure)
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def messages(self) -> AsyncIterator[bytes]:
        """Every message's data until :meth:`close`; StoreUnavailable once the connection is lost."""
        while True:
            while self._inbox:
                yield self._inbox.popleft()
            if self._closed:
                return
            if self._failure is not None:
                raise self._failure
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def close(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.close()
        self._wake()


def _checked(reply: Any) -> Any:
    if isinstance(reply, hiredis.ReplyError):
        raise StoreUnavailable(f"the session store (Redis) failed: {reply}")
    return reply
