"""Rate-limited logging: one repeated error is logged at most once per interval, with the count of repeats it
stood for.

Why: a condition that fails every request or every accept (the descriptor table full: asyncio's
"socket.accept() out of system resource", thousands a second with a traceback each) once wrote 108 MB of log in
30 s, which costs more than the failure it reports. "The same" is the same logger, level and message template
(``record.msg`` before its arguments are filled in), so a line naming a different session still counts as a
repeat, while a different failure is logged at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

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
