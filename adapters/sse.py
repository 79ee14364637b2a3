"""SSE framing, the event-id scheme and the bounded per-stream replay buffer (2025-11-25 basic/transports
§Resumability).

Event ids are ``"<stream>.<seq>"``: unique across all streams of a session (the stream number is minted from the
session record's counter) and they name the stream they belong to, so a ``GET`` with ``Last-Event-ID`` can be
answered by replaying only that stream's later events (2025-11-25: never another stream's).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from adapters.jsonwire import dumps


def event_id(stream: str, seq: int) -> str:
    return f"{stream}.{seq}"


# The longest sequence number read from a Last-Event-ID: more digits than any stream ever counts to. A longer
# one names no position (and int() refuses past 4300 digits, sys.get_int_max_str_digits).
MAX_SEQ_DIGITS = 18


def parse_event_id(value: str | None) -> tuple[str, int] | None:
    """``(stream, seq)`` of an id minted by :func:`event_id`, or None when ``value`` names no position."""
    if not value or "." not in value:
        return None
    stream, _, seq = value.rpartition(".")
    # isascii: str.isdigit also admits digits int() refuses ("²") or reads as another number ("٣").
    if not stream or not (seq.isascii() and seq.isdigit()) or len(seq) > MAX_SEQ_DIGITS:
        return None
    return stream, int(seq)


def encode_event(eid: str | None, message: object | None, retry_ms: int | None = None) -> bytes:
    """One SSE event; ``message=None`` is the priming event (an id with empty data, 2025-11-25
    basic/transports §Streamable HTTP)."""
    head = "" if eid is None else f"id: {eid}\n"
    if retry_ms is not None:
        head += f"retry: {retry_ms}\n"
    # Compact JSON holds no raw line break (they are escaped in strings), so the message is one data line.
    data = b"" if message is None else dumps(message)
    return (head + "event: message\ndata: ").encode() + data + b"\n\n"


KEEPALIVE = b": keep-alive\n\n"


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    message: object | None  # None = priming event

    def encode(self, stream: str, retry_ms: int | None = None) -> bytes:
        return encode_event(event_id(stream, self.seq), self.message, retry_ms)


PRIMING_SEQ = 0  # the priming event's seq: "nothing seen yet"; stored events start at 1
# Finished request streams of a session that stay resumable (the most recent ones): a client resumes a stream
# right after it broke, not hours later, and what a session holds stays bounded (in a process or a shared store).
FINISHED_STREAMS_KEPT = 16


def resumable(seq: int, oldest: int, next_seq: int) -> bool:
    """Whether a stream whose oldest kept event is ``oldest`` (``next_seq`` when none is kept) and whose next
    event will be ``next_seq`` can resume after ``seq`` without losing a message: the position was sent (the
    priming one included) and nothing after it was evicted. The one rule for a process's own buffer and a shared
    store's copy, so a resume is refused the same way on every replica."""
    return PRIMING_SEQ <= seq < next_seq and seq >= oldest - 1


@dataclass(frozen=True, slots=True)
class StoredEvents:
    """What a shared store holds of a stream after a position: its later events in order and whether the stream
    ended (its final message was written) with the last of them."""

    events: tuple[Event, ...]
    ended: bool


class ReplayBuffer:
    """The last ``capacity`` events of one stream. ``after(seq)`` is None when the client fell too far behind
    (its event was evicted) or names an event never sent: resuming then would silently lose messages, so the
    shell refuses instead."""

    __slots__ = ("_capacity", "_events", "_next")

    def __init__(self, capacity: int, first_seq: int = PRIMING_SEQ + 1) -> None:
        """``first_seq``: the seq the first appended event gets (a copy of another replica's stream starts where
        the copy does)."""
        self._capacity = max(1, capacity)
        # Made at the first event: an empty deque still holds a block of slots, and an idle session's GET stream
        # may never carry one (docs/benchmarks.md, idle memory).
        self._events: deque[Event] | None = None
        self._next = first_seq

    def append(self, message: object | None) -> Event:
        event = Event(self._next, message)
        self._next += 1
        if self._events is None:
            self._events = deque(maxlen=self._capacity)
        self._events.append(event)
        return event

    @property
    def next_seq(self) -> int:
        return self._next

    @property
    def oldest(self) -> int:
        """The oldest kept event's seq (``next_seq`` when none is kept)."""
        return self._events[0].seq if self._events else self._next

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return len(self._events) if self._events else 0

    def drop_after(self, seq: int) -> None:
        """Forget the events after ``seq``, which nobody was sent (a step whose store write failed: the shell's
        ``Mirror.released``); the next event is ``seq + 1`` again."""
        while self._events and self._events[-1].seq > seq:
            self._events.pop()
        self._next = min(self._next, seq + 1)

    def after(self, seq: int) -> list[Event] | None:
        if not resumable(seq, self.oldest, self._next):
            return None
        return [e for e in self._events if e.seq > seq] if self._events else []


class EventTooLarge(ValueError):
    """One SSE event went past the decoder's bound."""


class SseDecoder:
    """Incremental SSE parser for upstream response streams: feed bytes, get complete ``data`` payloads.

    Linear in the bytes fed: only each new chunk is searched for line ends, and the unfinished line is kept as a
    list of parts joined once when it ends (appending to one bytes buffer copied it whole on every chunk: one
    large event cost quadratic time). ``max_event_bytes`` (0: unbounded) bounds one event (its lines and the
    line in progress), never the stream: a listen lasts for ever."""

    def __init__(self, max_event_bytes: int = 0) -> None:
        self._pending: list[bytes] = []  # the parts of the line not ended yet
        self._data: list[str] = []
        self._size = 0  # bytes of the current event so far, the unfinished line included
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[str]:
        out: list[str] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end]
            if self._pending:
                self._pending.append(piece)
                piece = b"".join(self._pending)
                self._pending = []
            self._line(piece, end + 1 - start, out)
            start = end + 1
        if start < len(chunk):
            self._pending.append(chunk[start:])
            self._grow(len(chunk) - start)
        return out

    def _line(self, line: bytes, fed: int, out: list[str]) -> None:
        text = line.rstrip(b"\r").decode("utf-8", errors="replace")
        if text == "":
            if self._data:
                out.append("\n".join(self._data))
            self._data, self._size = [], 0
            return
        self._grow(fed)
        if text.startswith("data:"):
            self._data.append(text[5:][1:] if text[5:].startswith(" ") else text[5:])

    def _grow(self, count: int) -> None:
        self._size += count
        if self._max and self._size > self._max:
            raise EventTooLarge(f"an SSE event is over {self._max} bytes")
