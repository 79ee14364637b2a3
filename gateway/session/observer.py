"""The one interface through which the shell's traffic is watched (migration telemetry, and any other watcher).

Handlers make no telemetry calls of their own: they tell the gateway's :class:`Observer` that a request arrived,
that it was answered, or that a bridge exchange starts (whose watcher then sees every action batch of the
bridge machine and the exchange's end). :class:`Unobserved` is the default: nothing is watched, nothing costs.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web

from adapters.bridge import Action
from adapters.classify import Accepted
from adapters.records import PendingRound, SessionRecord
from adapters.task_poll import TaskOutcome


class ExchangeWatcher(Protocol):
    def __call__(self, record: PendingRound, actions: list[Action]) -> None: ...
    def done(self) -> None: ...


class Observer(Protocol):
    def arrived(self, request: web.Request) -> None:
        """The request's first moment at the endpoint (for its latency)."""

    def answered(self, request: web.Request, acc: Accepted, answer: web.StreamResponse,
                 bridged: bool | None = None) -> None:
        """An accepted request was answered. ``bridged``: whether an exchange already watches it (by default,
        whether one was made for this HTTP request). Must never raise."""

    def exchange(self, request: web.Request, session: SessionRecord,
                 message: dict[str, Any]) -> ExchangeWatcher | None:
        """The watcher of a request about to be bridged, or None."""

    def task_ended(self, outcome: TaskOutcome) -> None:
        """A 2025 task the session's registry first saw over (a task the bridge drives for a call is counted by
        its exchange's watcher instead). Must never raise."""


class Unobserved:
    def arrived(self, request: web.Request) -> None:
        return None

    def answered(self, request: web.Request, acc: Accepted, answer: web.StreamResponse,
                 bridged: bool | None = None) -> None:
        return None

    def exchange(self, request: web.Request, session: SessionRecord,
                 message: dict[str, Any]) -> ExchangeWatcher | None:
        return None

    def task_ended(self, outcome: TaskOutcome) -> None:
        return None


class Watchers:
    """Several exchange watchers as one (each sees every batch; a failing one never stops the others)."""

    def __init__(self, watchers: list[ExchangeWatcher]) -> None:
        self.watchers = watchers

    def __call__(self, record: PendingRound, actions: list[Action]) -> None:
        for watcher in self.watchers:
            watcher(record, actions)

    def done(self) -> None:
        for watcher in self.watchers:
            watcher.done()


class Observers:
    """Several observers as one, in order (usage accounting, then OpenTelemetry spans)."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers

    def arrived(self, request: web.Request) -> None:
        for observer in self.observers:
            observer.arrived(request)

    def answered(self, request: web.Request, acc: Accepted, answer: web.StreamResponse,
                 bridged: bool | None = None) -> None:
        for observer in self.observers:
            observer.answered(request, acc, answer, bridged)

    def exchange(self, request: web.Request, session: SessionRecord,
                 message: dict[str, Any]) -> ExchangeWatcher | None:
        watchers = [w for o in self.observers if (w := o.exchange(request, session, message)) is not None]
        if len(watchers) < 2:
            return watchers[0] if watchers else None
        return Watchers(watchers)

    def task_ended(self, outcome: TaskOutcome) -> None:
        for observer in self.observers:
            observer.task_ended(outcome)
