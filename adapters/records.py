"""The serializable records the gateway keeps per session and per pending bridge round.

Everything a second gateway process would need to continue a session or an MRTR round lives in these two
records (docs/design/replicas.md#session-stores): they hold only JSON-compatible values and round-trip through
``to_dict``/``from_dict`` unchanged. Sockets, streams and tasks are never referenced from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING, TypeVar

from adapters.jsonwire import JsonObject, JsonView

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Record = TypeVar("_Record", "SessionRecord", "PendingRound")


def _from_dict(cls: type[_Record], data: Mapping[str, object]) -> _Record:
    # The stored form is what to_dict wrote (JSON values of each field's type): checked by the fields' own use.
    make: Callable[..., _Record] = cls
    shape: type[DataclassInstance] = cls
    known = _known(shape)
    if data.keys() <= known:  # what this version wrote (every request's session parse): no filtering copy
        return make(**data)
    return make(**{k: v for k, v in data.items() if k in known})  # a newer writer's extra fields are dropped


@cache  # read on every request (the session record is parsed per request); the fields never change
def _names(cls: type[DataclassInstance]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


@cache
def _known(cls: type[DataclassInstance]) -> frozenset[str]:
    return frozenset(_names(cls))


@cache
def _unset_when_none(cls: type[DataclassInstance]) -> frozenset[str]:
    """The fields whose default is None: left out of the stored form while None (``from_dict`` restores them),
    so a record costs neither the bytes nor the parsing of every optional field it does not use."""
    return frozenset(f.name for f in fields(cls) if f.default is None)


def _to_dict(record: DataclassInstance) -> dict[str, object]:
    # A shallow view: the store serializes it at once (dataclasses.asdict deep-copies, which costs ~5x more).
    cls = type(record)
    unset = _unset_when_none(cls)
    return {name: value for name in _names(cls)
            if (value := getattr(record, name)) is not None or name not in unset}


@dataclass(slots=True)
class SessionRecord:
    """One legacy session (2025-11-25 basic/transports §Session Management)."""

    session_id: str
    principal: str
    protocol_version: str
    client_capabilities: JsonObject
    client_info: JsonObject
    created_ms: int
    last_seen_ms: int
    log_level: str | None = None
    subscriptions: list[str] = field(default_factory=list)
    initialized: bool = False
    # Roots are cached only for clients that declared roots.listChanged: they promise to tell us when the cache goes
    # stale (2025-11-25 client/roots), and notifications/roots/list_changed drops it
    # (docs/design/bridge.md#roots-cache).
    cached_roots: JsonObject | None = None
    # The upstream's discovered capabilities at initialize: which list_changed/subscribe we claimed.
    server_capabilities: JsonObject = field(default_factory=dict)
    # The per-peer pins this session was opened under: a snapshot, so a config reload leaves live sessions
    # as they were, and any replica holding the record applies the same pins. See adapters.peers.
    pins: JsonObject = field(default_factory=dict)
    upstream: str = "default"
    # The x-mcp-header maps learned from the upstream's tools/list (adapters.upstream.learned_header_maps), in the
    # record so that every replica mirrors the same Mcp-Param-* headers (docs/design/upstream.md#mcp-param--headers);
    # None: none learned, or too large to keep here (adapters.admission.header_maps_storable).
    header_maps: JsonObject | None = None
    # The 2025 tasks this session created (adapters.legacy_tasks): task id -> the 2025 Task as last seen, in
    # creation order; None while it has none.
    legacy_tasks: dict[str, JsonObject] | None = None

    def to_dict(self) -> dict[str, object]:
        return _to_dict(self)

    def identity(self) -> SessionRecord:
        """The session's identity alone (id, principal, negotiated version, times): what is kept of its record
        while a long-lived answer is open (``adapters.classify.kept_while_answering``)."""
        return SessionRecord(self.session_id, self.principal, self.protocol_version, {}, {}, self.created_ms,
                             self.last_seen_ms)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> SessionRecord:
        return _from_dict(cls, data)


class Phase(StrEnum):
    """Where a bridged request stands. A ``StrEnum``: the stored record holds the plain string."""

    UPSTREAM = "upstream"  # a round is in flight upstream
    AWAITING_CLIENT = "awaiting_client"  # the client was asked; its answers are awaited
    BACKOFF = "backoff"  # a waiting round: retried after a delay
    # The call came back as a task (io.modelcontextprotocol/tasks, adapters.task_poll): the gateway drives it.
    TASK_WAIT = "task_wait"  # waiting for the next tasks/get
    TASK_POLL = "task_poll"  # a tasks/get is in flight upstream
    TASK_UPDATE = "task_update"  # a tasks/update carrying the client's answers (``answers``) is in flight
    DONE = "done"


@dataclass(slots=True)
class PendingRound:
    """The state of one bridged request (2026-07-28 basic/patterns §Multi Round-Trip Requests), saved after
    every step.

    ``params`` is the client's original params dict: it is forwarded as is on every round (a retry repeats the
    original params), so opaque values in it (cursors, progress tokens, arguments) are never re-encoded.
    """

    bridge_id: str
    session_id: str
    downstream_id: str | int
    method: str
    params: JsonObject
    round: int = 0  # every upstream answer that needed another round (timers carry it to spot stale ones)
    input_rounds: int = 0  # rounds that asked for input: these count against max_rounds (waiting ones do not)
    phase: Phase = Phase.UPSTREAM
    request_state: str | None = None
    input_requests: dict[str, JsonView] = field(default_factory=dict)
    outstanding: dict[str, str] = field(default_factory=dict)  # gateway request id -> input key
    answers: JsonObject = field(default_factory=dict)  # input key -> client result (this round)
    state_only_rounds: int = 0
    url_elicitations: dict[str, str] = field(default_factory=dict)  # elicitationId -> url (accepted)
    minted_ids: dict[str, str] = field(default_factory=dict)  # input key -> elicitationId (this round)
    # For a replica taking the round over (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): when
    # the request arrived (the gateway's wall clock, ms: the total limit still counts from there), the name of the
    # request's SSE stream and the sequence number of the last event written on it when the record was saved.
    started_ms: int = 0
    stream: str | None = None
    stream_seq: int = 0
    # True when the round's upstream calls carry the client's own credential (adapters.takeover.token_goes_upstream: the
    # request came with an Authorization its upstream is passed). The credential itself is never stored: such a round is
    # continued only by a replica its client's next message reaches, which brings it
    # (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds, the sweep).
    authorized: bool | None = None
    # True while the round in flight upstream is one a replica taking it over sent again (adapters.takeover.resent):
    # the upstream may have acted on its first send, so an error answering it does not say the round failed.
    resent: bool | None = None
    # The upstream task driving the call
    # (docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks): its id, the server's last
    # pollIntervalMs, its last status and message as seen (``adapters.task_poll.TaskView.seen``), polls in a row that
    # found it unchanged (the backoff), progress notifications sent, and task calls in a row that failed.
    task_id: str | None = None
    task_poll_ms: int | None = None
    task_seen: str | None = None
    task_unchanged: int | None = None
    task_progress: int | None = None
    task_failures: int | None = None

    def to_dict(self) -> dict[str, object]:
        return _to_dict(self)

    @property
    def waiting(self) -> bool:
        """Waiting on the client or a backoff: what another process would need the record for."""
        return self.phase in (Phase.AWAITING_CLIENT, Phase.BACKOFF, Phase.TASK_WAIT)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> PendingRound:
        record = _from_dict(cls, data)
        record.phase = Phase(record.phase)
        return record
