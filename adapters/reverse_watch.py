"""Listens watching tasks held on other replicas (docs/design/eras.md#tasks-in-reverse): pure decisions, no I/O.

A 2026-07-28 client's ``subscriptions/listen`` may name tasks another replica holds (``adapters.reverse_tasks``:
a task lives where its upstream session is). The listen's replica asks each holder once, by a relayed
``tasks/get`` naming the listen's *watch* (:func:`watch_member`: this replica and a token); the holder registers
the watch (:data:`Watchers`), pushes it the state it answered, then every change of the task as it happens, each
push relayed as a parked call's retry is (:func:`push`), and acknowledged (:func:`ack`). The listen's replica
delivers a push at once (:func:`pushed`); a push whose listen ended is acknowledged as not watched, and the holder
drops that watch (:func:`still_watched`), as it drops every watch of a task that is terminal or forgotten.

The listen's replica decides what its listen is told and when its watch of a task ends (:class:`Watch`); the
holder decides which watches a change goes to. A holder that dies pushes nothing more: the listen's replica asks
again only at a slow safety interval (the shell's), which also repairs a lost push and serves a holder of the
previous version (which answers the ``tasks/get`` without registering the watch, so its answer is told as a push
is).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from adapters.errors import INVALID_PARAMS
from adapters.jsonwire import JsonObject, JsonView, members
from adapters.relay import ReplyTo
from adapters.reverse_tasks import TASKS, TERMINAL, notification, seen
from adapters.upstream import UnencodableHeader, encode_header_value

# The members of a relayed message this module adds: the watch a relayed tasks/get registers, the holder's word in
# its answer that it pushes the state itself, and a push's watch token and notification.
WATCH: Final = "watch"
PUSHED: Final = "pushed"
NOTIFY: Final = "notify"
_MESSAGE: Final = "message"
_WATCHING: Final = "watching"


# --- the listen's replica -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Watch:
    """One listen's watch of tasks held elsewhere: ``live`` the tasks still watched, by holder replica; ``told``
    what the listen was last told of each (``adapters.reverse_tasks.seen``)."""

    live: Mapping[str, str]
    told: Mapping[str, str] = field(default_factory=dict)


def start(elsewhere: Mapping[str, str]) -> Watch:
    return Watch(dict(elsewhere))


def over(watch: Watch) -> bool:
    """Nothing more can be told: every task is terminal, unknown at its holder, or its holder is gone."""
    return not watch.live


def holders(watch: Watch) -> frozenset[str]:
    return frozenset(watch.live.values())


def asking(task_id: str, version: str, meta: JsonView) -> tuple[dict[str, str], JsonObject] | None:
    """The relayed ``tasks/get`` a watch asks a holder, with its routing headers as the listen's client would send
    them (2026-07-28 basic/transports: ``Mcp-Name`` carries the task id); None for an id no header can carry (never
    asked: its watch ends)."""
    try:
        name = encode_header_value(task_id)
    except UnencodableHeader:
        return None
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": "tasks/get", "Mcp-Name": name}
    params: JsonObject = {"taskId": task_id, "_meta": dict(meta)}
    return headers, {"jsonrpc": "2.0", "id": f"listen-{task_id}", "method": "tasks/get", "params": params}


def watch_member(to: ReplyTo) -> JsonObject:
    """What a relayed ``tasks/get`` carries to register the listen's watch ``to`` with the holder."""
    return {WATCH: {"replica": to.replica, "token": to.token}}


def answered(watch: Watch, task_id: str, said: JsonView | None) -> tuple[Watch, JsonObject | None]:
    """The holder's answer to the watch's ``tasks/get`` (None: the holder is gone): the notification for the listen,
    if any. The watch of the task ends when its holder is gone or it is unknown there (INVALID_PARAMS: forgotten, or
    lost), with nothing said (a ``tasks/get`` tells why); another failure is asked again at the next safety check.
    A holder that registered the watch (:data:`PUSHED`) pushes the state it answered itself, in order with the
    changes after it: the answer only says whether the watch goes on."""
    if task_id not in watch.live:
        return watch, None
    if said is None:
        return _ended(watch, task_id), None
    error = members(said.get("error"))
    if error:
        return (_ended(watch, task_id) if error.get("code") == INVALID_PARAMS else watch), None
    task = said.get("result")
    if said.get(PUSHED) is True or not isinstance(task, Mapping):
        return watch, None
    return _told(watch, task_id, task)


def pushed(watch: Watch, message: JsonView) -> tuple[Watch, JsonObject | None]:
    """A change the holder pushed (an ``adapters.reverse_tasks.notification``): for the listen when it watches the
    task and it is news; the watch of the task ends once it is terminal (nothing changes after)."""
    params = members(message.get("params"))
    task_id = params.get("taskId")
    if message.get("method") != TASKS or not isinstance(task_id, str) or task_id not in watch.live:
        return watch, None
    return _told(watch, task_id, params)


def _told(watch: Watch, task_id: str, task: JsonView) -> tuple[Watch, JsonObject | None]:
    now = seen(task)
    out = notification(task) if now != watch.told.get(task_id) else None
    told = {**watch.told, task_id: now}
    return (_ended(watch, task_id) if task.get("status") in TERMINAL else Watch(watch.live, told)), out


def _ended(watch: Watch, task_id: str) -> Watch:
    return Watch({t: h for t, h in watch.live.items() if t != task_id},
                 {t: s for t, s in watch.told.items() if t != task_id})


def notified(payload: JsonView) -> tuple[str, JsonView] | None:
    """A push relayed here (:func:`push`): its watch token and notification; None when the payload is none."""
    token, message = payload.get(NOTIFY), payload.get(_MESSAGE)
    return (token, message) if isinstance(token, str) and isinstance(message, Mapping) else None


def ack(watching: bool) -> JsonObject:
    """The answer to a push: whether a listen here still watches under its token."""
    return {"jsonrpc": "2.0", "id": None, "result": {_WATCHING: watching}}


# --- the holder ---------------------------------------------------------------------------------------------
Watchers = Mapping[tuple[str, str], frozenset[ReplyTo]]
"""The watches of listens on other replicas, by the principal and task id they watch."""


def watch_of(relayed: JsonView) -> ReplyTo | None:
    """The watch a relayed ``tasks/get`` registers (:func:`watch_member`), or None."""
    raw = members(relayed.get(WATCH))
    replica, token = raw.get("replica"), raw.get("token")
    return ReplyTo(replica, token) if isinstance(replica, str) and isinstance(token, str) else None


def watched(watchers: Watchers, principal: str, task_id: str, to: ReplyTo,
            terminal: bool) -> dict[tuple[str, str], frozenset[ReplyTo]]:
    """The watch registered (again: the safety check asks with it too); a terminal task's is not kept, its state
    is pushed once and nothing changes after."""
    out = dict(watchers)
    if not terminal:
        out[(principal, task_id)] = out.get((principal, task_id), frozenset()) | {to}
    return out


def recipients(watchers: Watchers, principal: str, task_id: str) -> frozenset[ReplyTo]:
    """The watches a change of the task goes to: its principal's, of that task, only."""
    return watchers.get((principal, task_id), frozenset())


def dropped(watchers: Watchers, principal: str, task_id: str) -> dict[tuple[str, str], frozenset[ReplyTo]]:
    """The task is terminal (its last state was pushed) or forgotten: nothing more is pushed for it."""
    return {key: tos for key, tos in watchers.items() if key != (principal, task_id)}


def unwatched(watchers: Watchers, to: ReplyTo) -> dict[tuple[str, str], frozenset[ReplyTo]]:
    """The watch ``to`` ended (its listen ended, or its replica is gone): every registration of it goes."""
    out = {key: tos - {to} for key, tos in watchers.items()}
    return {key: tos for key, tos in out.items() if tos}


def push(upstream: str, to: ReplyTo, message: JsonObject) -> JsonObject:
    """A change for the watch ``to``, relayed to its replica as a retry is (``upstream`` finds the bridge)."""
    return {"upstream": upstream, NOTIFY: to.token, _MESSAGE: message}


def still_watched(reply: JsonView | None) -> bool:
    """The answer to a push says a listen still watches: else (its listen ended, its replica is gone, or is of the
    previous version and knows no push) the holder drops the watch."""
    return reply is not None and members(reply.get("result")).get(_WATCHING) is True
