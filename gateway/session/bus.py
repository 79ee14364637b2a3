"""The message bus between replicas on one store (docs/design/replicas.md#replicas-relay-through-the-store): the
:class:`Bus` protocol a store backend provides for the relay (``gateway.session.relay``), and :class:`LocalBus`, the
in-process one.

A bus carries ``adapters.relay.Relayed`` values to one replica or to every replica, and says whether a replica
listens. It keeps nothing: a message published while nobody listens is lost, as on Redis pub/sub, so the relay
asks for acknowledgements and falls back to the stored round. The Redis bus is ``RedisStore``'s
(``gateway.session.redis_store``); :class:`LocalBus` is the memory store's, for replicas in one process (the
shared memory backend of ``gateway.session.store``), and encodes every message as the Redis bus does, so what
would not cross Redis fails here too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from adapters.relay import Drop, Relayed, decode, encode

__all__ = ["Bus", "LocalBus", "Subscription"]


class Subscription(Protocol):
    """One replica's end of the bus: the messages sent to it and to every replica, in order."""

    def messages(self) -> AsyncIterator[Relayed]:
        """Every message from now on, until the subscription closes; raises
        :class:`~gateway.session.store.StoreUnavailable` when the bus fails (then subscribe again)."""
        ...

    async def close(self) -> None: ...


class Bus(Protocol):
    """Where replicas on one store send each other ``Relayed`` messages."""

    async def send(self, replica: str | None, message: Relayed) -> bool:
        """Send ``message`` to ``replica`` (None: to every replica): whether some replica received it. Raises
        :class:`~gateway.session.store.StoreUnavailable` when the bus cannot be reached."""
        ...

    async def listens(self, replica: str) -> bool:
        """Whether ``replica`` is subscribed (one that died, or lost the bus, is not)."""
        ...

    async def subscribe(self, replica: str) -> Subscription:
        """Receive what is sent to ``replica`` and to every replica (raises ``StoreUnavailable`` while the bus
        is down)."""
        ...


_EVERYONE = ""  # LocalBus's address of every replica (replica ids are hex: never empty)


class LocalBus:
    """A :class:`Bus` within one process: each subscription a queue, each message its encoded text."""

    def __init__(self) -> None:
        self._queues: dict[str, list[asyncio.Queue[bytes | None]]] = {}

    async def send(self, replica: str | None, message: Relayed) -> bool:
        queues = self._queues.get(_EVERYONE if replica is None else replica, [])
        data = encode(message)
        for queue in queues:
            queue.put_nowait(data)
        return bool(queues)

    async def listens(self, replica: str) -> bool:
        return bool(self._queues.get(replica))

    async def subscribe(self, replica: str) -> Subscription:
        return _LocalSubscription(self, (replica, _EVERYONE))

    def _join(self, addresses: tuple[str, ...], queue: asyncio.Queue[bytes | None]) -> None:
        for address in addresses:
            self._queues.setdefault(address, []).append(queue)

    def _leave(self, addresses: tuple[str, ...], queue: asyncio.Queue[bytes | None]) -> None:
        for address in addresses:
            queues = self._queues.get(address, [])
            if queue in queues:
                queues.remove(queue)
            if not queues:
                self._queues.pop(address, None)


class _LocalSubscription:
    def __init__(self, bus: LocalBus, addresses: tuple[str, ...]) -> None:
        self._bus, self._addresses = bus, addresses
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        bus._join(addresses, self._queue)

    async def messages(self) -> AsyncIterator[Relayed]:
        while (data := await self._queue.get()) is not None:
            relayed = decode(data)
            if not isinstance(relayed, Drop):
                yield relayed

    async def close(self) -> None:
        self._bus._leave(self._addresses, self._queue)
        self._queue.put_nowait(None)
