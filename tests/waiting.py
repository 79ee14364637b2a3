"""Waiting in tests: on a condition or an event, never on a guessed duration.

A test that sleeps "long enough" for something to happen is slow when the guess is generous and flaky when the
machine is busy. Tests here wait for the thing itself: ``until`` re-checks a condition, ``within`` bounds an
awaitable that ends on its own, ``until_sync`` does the same from plain threads and around subprocesses. Every
deadline is only a bound on a failure, scaled by ``TIMING``: set ``MCP_GATEWAY_TEST_TIMING=5`` on a slow or
shared machine to give every wait five times longer before the test fails (the model is the ``MS`` unit in
websockets' ``tests/utils.py``). A passing test takes as long with any factor.

The few sleeps a scenario needs (a fake server that never answers, a token that must really expire, a client
that dribbles bytes) are written at their call site with a ``# sleep: <why>`` comment; ``tests/test_no_bare_sleeps.py``
counts the sleeps without one.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

TIMING = float(os.environ.get("MCP_GATEWAY_TEST_TIMING", "1"))
"""The factor every deadline is multiplied by (the environment variable ``MCP_GATEWAY_TEST_TIMING``, default 1)."""

POLL = 0.01
"""How often a condition with no event to await is re-checked (seconds; not scaled: it bounds no failure)."""


def scaled(seconds: float) -> float:
    """A deadline or a scenario's delay, in seconds, under the timing factor."""
    return seconds * TIMING


def _describe(check: Callable[..., Any], what: str, show: Callable[[], Any] | None) -> str:
    name = what or getattr(check, "__qualname__", repr(check))
    return f"{name} {show()}" if show is not None else name


async def until(check: Callable[[], Any], what: str = "", show: Callable[[], Any] | None = None,
                seconds: float = 20.0) -> Any:
    """Wait for ``check()`` (a plain or an async callable) to return something truthy, and return it.

    Fails the test naming ``what`` (and ``show()``, the state worth seeing) when it is still false after
    ``seconds``, scaled by ``TIMING``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + scaled(seconds)
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"not within {scaled(seconds):g} s: {_describe(check, what, show)}")
        await asyncio.sleep(POLL)  # sleep: the poll interval of the one waiting helper


def until_sync(check: Callable[[], Any], what: str = "", show: Callable[[], Any] | None = None,
               seconds: float = 20.0) -> Any:
    """``until`` for code with no event loop: a thread, a subprocess's side effects, a file appearing."""
    deadline = time.monotonic() + scaled(seconds)
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {scaled(seconds):g} s: {_describe(check, what, show)}")
        time.sleep(POLL)  # sleep: the poll interval of the one waiting helper


async def accepts(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``port``: a condition for ``until`` while a server process starts."""
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    return True


def accepts_sync(port: int, host: str = "127.0.0.1") -> bool:
    """``accepts`` for ``until_sync``."""
    try:
        socket.create_connection((host, port), timeout=0.5).close()
    except OSError:
        return False
    return True


def hung_up(request: Any) -> bool:
    """Whether the peer hung up ``request``'s connection (or the server let it go)."""
    return request.transport is None or bool(request.transport.is_closing())


async def until_hung_up(request: Any, unless: asyncio.Event | None = None) -> None:
    """A fake server's handler that never answers: return once the peer hung up ``request``'s connection (or,
    given ``unless``, once the test sets that event).

    aiohttp gives a handler no event for a hang-up (it may cancel the handler, which ends this too), so the
    transport is polled; there is no deadline: a test that waits on the hang-up bounds that wait itself.
    """
    while not hung_up(request) and not (unless is not None and unless.is_set()):
        await asyncio.sleep(POLL)  # sleep: the poll interval of the one waiting helper


async def within(step: Awaitable[T], seconds: float = 30.0, what: str = "") -> T:
    """Await ``step``, which ends on its own; a ``seconds`` bound (scaled) turns a hang into a failure.

    Raises ``TimeoutError`` (an ``asyncio.wait_for`` timeout) naming ``what`` when the bound passes, so a test
    that expects the step never to end can still say so with ``pytest.raises(TimeoutError)``.
    """
    try:
        return await asyncio.wait_for(step, scaled(seconds))
    except TimeoutError as e:
        raise TimeoutError(f"not within {scaled(seconds):g} s: {what or step!r}") from e


async def lines_until(read: Callable[[], Awaitable[bytes]], match: Callable[[str], bool],
                      seconds: float = 30.0) -> list[str]:
    """Read lines with ``read()`` (a ``StreamReader.readline``) until one ``match``es; every line read, in order.

    An empty read is the end of the stream and fails the test, as does the (scaled) bound.
    """
    seen: list[str] = []

    async def scan() -> list[str]:
        while True:
            raw = await read()
            if not raw:
                raise AssertionError(f"the stream ended before the awaited line; it said {seen[-10:]}")
            seen.append(raw.decode(errors="replace").rstrip("\r\n"))
            if match(seen[-1]):
                return seen
    try:
        return await asyncio.wait_for(scan(), scaled(seconds))
    except TimeoutError as e:
        raise AssertionError(f"no awaited line within {scaled(seconds):g} s; the stream said {seen[-10:]}") from e
