"""Rate-limited logging: one repeated error is logged at most once per interval, with the count of repeats it
stood for. And the access log, with the secrets some URLs carry redacted (:class:`RedactingAccessLogger`).

Why: a condition that fails every request or every accept (the descriptor table full: asyncio's
"socket.accept() out of system resource", thousands a second with a traceback each) once wrote 108 MB of log in
30 s, which costs more than the failure it reports. "The same" is the same logger, level and message template
(``record.msg`` before its arguments are filled in), so a line naming a different session still counts as a
repeat, while a different failure is logged at once.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote_plus

from aiohttp.web_log import AccessLogger

# Distinct templates remembered: a flood of different ones cannot grow the filter's memory past this.
MAX_KEYS = 1024


class RepeatFilter(logging.Filter):
    """A :class:`logging.Filter` for handlers (a handler's filters see every record it is given, propagated from
    any logger). ``clock`` is injected by tests."""

    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval, self.clock = interval, clock
        self._last: dict[tuple[str, int, str], tuple[float, int]] = {}  # key -> (logged at, repeats since)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.interval <= 0 or record.levelno < logging.WARNING:
            return True  # info lines (the access log) are the operator's to switch off, not ours to thin
        key, now = (record.name, record.levelno, str(record.msg)), self.clock()
        seen = self._last.get(key)
        if seen is not None and now - seen[0] < self.interval:
            self._last[key] = (seen[0], seen[1] + 1)
            return False
        if seen is not None and seen[1]:
            record.msg = (f"{record.msg} [{seen[1]} repeats of this message suppressed in the last "
                          f"{now - seen[0]:.0f} s]")
        self._remember(key, now)
        return True

    def _remember(self, key: tuple[str, int, str], now: float) -> None:
        self._last.pop(key, None)
        while len(self._last) >= MAX_KEYS:  # the oldest logged first (dicts keep insertion order)
            del self._last[next(iter(self._last))]
        self._last[key] = (now, 0)


def install(interval: float) -> RepeatFilter:
    """Put one shared filter on every root handler (``logging.basicConfig`` made them)."""
    shared = RepeatFilter(interval)
    for handler in logging.getLogger().handlers:
        handler.addFilter(shared)
    return shared


# Query parameters that are credentials: the HTTP+SSE door's session id (``/messages?session_id=…``: whoever has it
# can post into the session, 2024-11-05 basic/transports §HTTP with SSE) and the dashboard's admin token
# (``/migration?token=…``). Their values never reach the access log.
SECRET_QUERY_KEYS = frozenset({"session_id", "token"})
REDACTED = "<redacted>"
_QUERY = re.compile(r"\?([^\s#]*)")


def _redact_pairs(match: re.Match[str]) -> str:
    pairs = match.group(1).split("&")
    return "?" + "&".join(f"{key}={REDACTED}" if "=" in pair and unquote_plus(key := pair.partition("=")[0])
                          in SECRET_QUERY_KEYS else pair for pair in pairs)


def redact_query(text: str) -> str:
    """``text`` (a request line, a URL) with the values of :data:`SECRET_QUERY_KEYS` in every query replaced by
    ``<redacted>``; the key stays, so the line still says what kind of request it was."""
    return _QUERY.sub(_redact_pairs, text) if "?" in text else text


class RedactingAccessLogger(AccessLogger):
    """aiohttp's access log (its format unchanged), with :func:`redact_query` applied to the request line and to
    the request headers it prints (a ``Referer`` can carry the same URL)."""

    def _format_line(self, request: Any, response: Any, time: float) -> Iterable[tuple[str | tuple[str, str], str]]:
        return [(key, redact_query(value) if isinstance(value, str) else value)
                for key, value in super()._format_line(request, response, time)]
