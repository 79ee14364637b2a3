"""``serve --trace FILE``: the tap that writes every legacy and upstream message as a JSON Lines record.

The record itself (what it holds, how it is redacted) is :func:`adapters.trace.trace_record`; this module owns the
I/O. Which legacy request a message belongs to comes from :data:`SCOPE`, a context variable the HTTP handler sets
(``gateway.http.tracing``): the exchange's tasks are created in the handler's context and inherit it, so an
upstream call made three rounds later still knows its request. Records are encoded on the loop (the message may
be written on afterwards) and written by one thread: a file write per message on the loop would stall it.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.jsonwire import dumps
from adapters.trace import Seen, TapKind, every_kind, trace_record

log = logging.getLogger("gateway.trace")


@dataclass
class Scope:
    """The legacy request a handler serves. ``runtimes`` (the gateway's) gives the bridge round when a message is
    seen; the last one seen is kept for the messages after the exchange ended (its final answer)."""

    session: str | None
    request: Any
    runtimes: Any = None
    round: int | None = None
    sent: set[str] = field(default_factory=set)
    traced: bool = True  # the peer's choices ([peers.trace] over [gateway.trace])
    content: bool | None = None  # None: the trace's own  # responses already traced from a stream (by encoded id)

    def current_round(self) -> int | None:
        runtime = self.runtimes.get(self.session) if self.runtimes is not None and self.session else None
        exchange = runtime.exchanges.get(self.request) if runtime is not None else None
        if exchange is not None:
            self.round = exchange.record.round
        return self.round

    def note(self, kind: str, message: Any) -> None:
        """Remember a response traced as pushed on a stream: the same message returned as JSON is not traced
        twice (gateway.http.streams.write_stream answers a lone response as JSON)."""
        if kind == TapKind.DOWNSTREAM and isinstance(message, dict) and "method" not in message:
            self.sent.add(dumps(message.get("id")).decode())

    def streamed(self, message: Any) -> bool:
        return isinstance(message, dict) and dumps(message.get("id")).decode() in self.sent


SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("trace_scope", default=None)


class Tracer:
    """The tap (``create_app(config, tap=tracer)``); :meth:`close` writes what is queued and stops the writer."""

    every_kind = True  # adapters.trace.every_kind: this tap wants client messages and upstream answers too

    def __init__(self, path: str | Path, *, max_bytes: int, content: bool = False, enabled: bool = True) -> None:
        self.path, self.max_bytes, self.content = Path(path), max_bytes, content
        self.enabled = enabled  # for messages outside any request's scope (the peers' choices are in the scope)
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        # Opened here, on the caller's thread: a file that cannot be written stops start-up (OSError) instead of
        # killing the writer thread while the gateway serves on without its trace.
        self._writer = _RotatingFile(self.path, self.max_bytes)
        self._thread = threading.Thread(target=self._drain, name="gateway-trace", daemon=True)
        self._thread.start()

    def __call__(self, kind: str, message: Any) -> None:
        scope = SCOPE.get()
        if not (self.enabled if scope is None else scope.traced):
            return
        if scope is not None:
            scope.note(kind, message)
        content = self.content if scope is None or scope.content is None else scope.content
        seen = Seen(scope.session if scope else None, scope.request if scope else None,
                    scope.current_round() if scope else None, time.monotonic() * 1000)
        for one in message if isinstance(message, list) else [message]:  # a batch: one record per message
            record = trace_record(TapKind(kind), one, seen, content=content)
            self._queue.put(dumps(record) + b"\n")

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _drain(self) -> None:
        writer: _RotatingFile | None = self._writer
        try:
            while True:
                line = self._queue.get()
                lines = [line]
                while line is not None and not self._queue.empty():  # everything queued meanwhile: one flush
                    line = self._queue.get()
                    lines.append(line)
                writer = self._write(writer, [one for one in lines if one is not None])
                if line is None:
                    return
        finally:
            if writer is not None:
                writer.close()

    def _write(self, writer: _RotatingFile | None, lines: list[bytes]) -> _RotatingFile | None:
        """A write that fails (disk full, the folder removed) is said once; the records after it are dropped, so
        the queue does not grow without bound."""
        if writer is None:
            return None
        try:
            writer.write(lines)
        except OSError as exc:
            log.error("trace %s: cannot write (%s): tracing stops", self.path, exc.strerror or exc)
            with contextlib.suppress(OSError):
                writer.close()
            return None
        return writer


class Tee:
    """A trace and another tap (``check``'s round counter) as one tap: the trace sees every kind, the other
    tap only the two original ones (adapters.trace.every_kind)."""

    every_kind = True

    def __init__(self, tracer: Tracer, other: Callable[[str, Any], None]) -> None:
        self.tracer, self.other = tracer, other
        self.other_every_kind = every_kind(other)

    def __call__(self, kind: str, message: Any) -> None:
        self.tracer(kind, message)
        if self.other_every_kind or kind in (TapKind.UPSTREAM, TapKind.DOWNSTREAM):
            self.other(kind, message)


class _RotatingFile:
    """Appends lines; a line that would take the file past ``max_bytes`` first moves it to ``FILE.1``."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path, self.max_bytes = path, max_bytes
        self._file = open(path, "ab")  # held open for the writer thread's life
        self._size = self._file.tell()

    def write(self, lines: list[bytes]) -> None:
        for line in lines:
            if self._size and self._size + len(line) > self.max_bytes:
                self._rotate()
            self._file.write(line)
            self._size += len(line)
        self._file.flush()

    def _rotate(self) -> None:
        self._file.close()
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._file = open(self.path, "ab")
        self._size = 0

    def close(self) -> None:
        self._file.close()
