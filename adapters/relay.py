"""The pure parts of the replica relay (docs/design/replicas.md#replicas-relay-through-the-store): the ownership keys,
the messages replicas send each other and their wire form, and where a client's message for an exchange this replica
does not hold goes.

Several gateway replicas on one shared store serve the same legacy sessions without sticky routing, but an
exchange (the task running one bridged request) lives in the replica that got the request. The replica that asks
the client records itself as the owner of each id it asks under (:func:`answer_key`) and of the request being
bridged (:func:`request_key`); another replica that gets the client's answer or cancel for it looks the owner up
and passes the message on (:func:`route`). The shell (``gateway.session.relay``) does the I/O.

A relayed message is one of :data:`Relayed`, a frozen dataclass per kind carrying only its own fields;
:func:`encode` and :func:`decode` are its wire form (a JSON object: ``k`` the kind, ``s`` the session, ``m`` the
client's message, and for a message that asks for an answer ``r`` the replica to send it to, ``t`` its token, ``h``
an acknowledgement's word). That form is the one replicas of the previous version send, so replicas of both
versions on one store understand each other during a rolling upgrade.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias, assert_never

from adapters.jsonwire import ENCODED_DEPTH, JsonView, dumps, loads

__all__ = ["Ack", "Answer", "Cancel", "Drop", "DropReason", "End", "RelayKind", "RelayTo", "Relayed", "Reply",
           "ReplyTo", "Retry", "answer_key", "broadcast_channel", "decode", "encode", "relay_channel", "request_key",
           "route"]


class RelayKind(StrEnum):
    """A relayed message's kind, as its wire form names it (``k``)."""

    ANSWER = "answer"  # a client's answer to a request the owner's exchange sent it
    CANCEL = "cancel"  # a client's notifications/cancelled for a request the owner is bridging
    END = "end"  # a session ended (DELETE) on some replica: every replica ends its runtime for it
    ACK = "ack"  # the owner's word on a relayed answer or cancel that asked for one: acted on, or not held
    # The reverse bridge (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): a 2026
    # client's retry of a call parked on another replica, or its request about a task held there
    # (docs/design/eras.md#tasks-in-reverse), and that replica's JSON-RPC answer to it, sent back to the replica the
    # client waits on; also a task's change its holder pushes to a listen's replica, and that replica's word on it.
    RETRY = "retry"
    REPLY = "reply"


@dataclass(frozen=True, slots=True)
class ReplyTo:
    """Where the answer to a relayed message goes: the replica that sent it, and the token it waits under."""

    replica: str
    token: str


@dataclass(frozen=True, slots=True)
class _FromClient:
    """A client's message passed on to the owner; ``ack``: the sender asks to be told once it is acted on, or that
    it was not held (docs/design/replicas.md#replicas-relay-through-the-store)."""

    session_id: str
    message: JsonView
    ack: ReplyTo | None = None

    def acked(self, held: bool) -> Ack | None:
        """The acknowledgement this message asked for (None: it asked for none)."""
        return None if self.ack is None else Ack(self.session_id, self.ack, held)


@dataclass(frozen=True, slots=True)
class Answer(_FromClient):
    """A client's answer for the owner's exchange (acknowledged once its step is saved)."""


@dataclass(frozen=True, slots=True)
class Cancel(_FromClient):
    """A client's ``notifications/cancelled`` for a request the owner bridges (acknowledged once the request
    ended there)."""


@dataclass(frozen=True, slots=True)
class End:
    """A session ended on some replica: every replica ends its runtime for it."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Ack:
    """The owner's word on an :class:`Answer` or :class:`Cancel` that asked for one: ``held`` whether it held the
    round and acted on it."""

    session_id: str
    to: ReplyTo
    held: bool


@dataclass(frozen=True, slots=True)
class Retry:
    """A 2026 client's retry of a reverse-bridged call parked on the receiving replica, or its request about a task
    held there (``message``: the upstream's name, the principal and the request); answered with a :class:`Reply`."""

    message: JsonView
    to: ReplyTo

    def reply(self, message: JsonView) -> Reply:
        return Reply(message, self.to)


@dataclass(frozen=True, slots=True)
class Reply:
    """The JSON-RPC answer to a :class:`Retry`, for the replica the client waits on."""

    message: JsonView
    to: ReplyTo


Relayed: TypeAlias = Answer | Cancel | End | Ack | Retry | Reply


def encode(relayed: Relayed) -> bytes:
    """The wire form (the previous version's: a reverse message's session is ``""``, a message asking for an answer
    carries ``h`` false)."""
    match relayed:
        case Answer(session, message, ack) | Cancel(session, message, ack):
            kind = RelayKind.ANSWER if isinstance(relayed, Answer) else RelayKind.CANCEL
            raw: dict[str, Any] = {"k": kind.value, "s": session, "m": message}
            if ack is not None:
                raw |= {"r": ack.replica, "t": ack.token, "h": False}
            return dumps(raw)
        case End(session):
            return dumps({"k": RelayKind.END.value, "s": session, "m": None})
        case Ack(session, to, held):
            return dumps({"k": RelayKind.ACK.value, "s": session, "m": None, "r": to.replica, "t": to.token, "h": held})
        case Retry(message, to) | Reply(message, to):
            kind = RelayKind.RETRY if isinstance(relayed, Retry) else RelayKind.REPLY
            return dumps({"k": kind.value, "s": "", "m": message, "r": to.replica, "t": to.token, "h": False})
        case _:
            assert_never(relayed)


class DropReason(StrEnum):
    """Why a message is dropped: nobody here or elsewhere awaits it (:func:`route`), or it is no relayed message
    at all (:func:`decode`: a foreign publisher on the channel, or a damaged one)."""

    NO_OWNER = "no_owner"  # never asked, already answered, or its owner's record expired
    OWNED_HERE = "owned_here"  # this replica owns it but no longer holds it: answered or ended meanwhile
    NOT_JSON = "not_json"  # not a JSON text (or nested deeper than the gateway writes)
    NOT_AN_ENVELOPE = "not_an_envelope"  # JSON, but not an object naming a kind this version knows
    BAD_FIELDS = "bad_fields"  # a known kind whose session, message, reply address or word is missing or mistyped


@dataclass(frozen=True, slots=True)
class RelayTo:
    owner: str


@dataclass(frozen=True, slots=True)
class Drop:
    reason: DropReason


_KINDS = {kind.value: kind for kind in RelayKind}


def decode(data: bytes | str) -> Relayed | Drop:
    """The message ``data`` encodes, or a :class:`Drop` saying why it is none. It accepts exactly what the
    previous version's decoder did, so either version reads the other's messages."""
    try:
        raw = loads(data, ENCODED_DEPTH)  # a client message (MAX_DEPTH) in an envelope
    except ValueError:
        return Drop(DropReason.NOT_JSON)
    if not isinstance(raw, dict):
        return Drop(DropReason.NOT_AN_ENVELOPE)
    tag = raw.get("k")
    if not isinstance(tag, str) or tag not in _KINDS:
        return Drop(DropReason.NOT_AN_ENVELOPE)
    kind = _KINDS[tag]
    session, message = raw.get("s"), raw.get("m")
    replica, token, held = raw.get("r"), raw.get("t"), raw.get("h", False)
    if not isinstance(session, str) or not isinstance(held, bool):
        return Drop(DropReason.BAD_FIELDS)
    if isinstance(replica, str) and isinstance(token, str):
        to: ReplyTo | None = ReplyTo(replica, token)
    elif (replica, token) == (None, None):
        to = None
    else:
        return Drop(DropReason.BAD_FIELDS)
    match kind:
        case RelayKind.END:
            # The previous version let an end carry a message object (and ignored it): so does this one.
            return End(session) if message is None or isinstance(message, dict) else Drop(DropReason.BAD_FIELDS)
        case RelayKind.ACK:
            return Ack(session, to, held) if message is None and to is not None else Drop(DropReason.BAD_FIELDS)
        case RelayKind.ANSWER | RelayKind.CANCEL | RelayKind.RETRY | RelayKind.REPLY:
            if not isinstance(message, dict):
                return Drop(DropReason.BAD_FIELDS)
            if kind is RelayKind.ANSWER:
                return Answer(session, message, to)
            if kind is RelayKind.CANCEL:
                return Cancel(session, message, to)
            if to is None:
                return Drop(DropReason.BAD_FIELDS)
            return Retry(message, to) if kind is RelayKind.RETRY else Reply(message, to)
        case _:
            assert_never(kind)


def answer_key(gateway_id: Any) -> str | None:
    """The ownership key of a request the gateway sent the client; None for an id the gateway never mints (the
    gateway's ids are strings: ``gateway.session.runtime.random_id``)."""
    return f"oa:{gateway_id}" if isinstance(gateway_id, str) else None


def request_key(session_id: str, downstream_id: str | int) -> str:
    """The ownership key of a client request being bridged; the id as JSON, so ``1`` and ``"1"`` differ."""
    return f"oq:{session_id}:{dumps(downstream_id).decode()}"


def relay_channel(prefix: str, replica: str) -> str:
    return f"{prefix}relay:{replica}"


def broadcast_channel(prefix: str) -> str:
    return f"{prefix}relay-all"  # replica ids are hex, so this never names a replica's channel


def route(owner: str | None, me: str) -> RelayTo | Drop:
    """Where a message for an exchange this replica does not hold goes (the caller found it not held here).
    Dropping is what a single gateway does with a late or unknown answer (2025-11-25 basic/utilities
    §Cancellation: a late answer or cancel is a race the receiver ignores)."""
    if owner is None:
        return Drop(DropReason.NO_OWNER)
    if owner == me:
        return Drop(DropReason.OWNED_HERE)
    return RelayTo(owner)
