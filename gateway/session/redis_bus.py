"""``RedisBus``: the :class:`~gateway.session.bus.Bus` of replicas on one Redis, on its pub/sub
(docs/design/replicas.md#replicas-relay-through-the-store), and how redis-py's failures become the store's one
exception.

Each replica subscribes to its own channel (``<prefix>relay:<replica>``) and to the broadcast one
(``<prefix>relay-all``), named by ``adapters.relay``. A message is its ``adapters.relay.encode`` text; anything
else on a channel (a foreign publisher) is skipped. Publishing and asking who listens go over the store's pipelined
connection (``gateway.session.redis_wire``); a subscription is a connection of its own made by it
(``RedisWire.subscribe``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.exceptions import RedisError

from adapters import relay as R
from gateway.session.bus import Subscription
from gateway.session.redis_wire import RedisWire, Subscriber
from gateway.session.store import StoreUnavailable


@asynccontextmanager
async def redis_failures() -> AsyncIterator[None]:
    """Every Redis failure as the store's one exception (OSError: a socket error redis-py did not wrap)."""
    try:
        yield
    except (RedisError, OSError) as exc:
        raise StoreUnavailable(f"the session store (Redis) failed: {exc}") from exc


class RedisBus:
    """Replicas' messages on Redis pub/sub, under the store's key prefix."""

    def __init__(self, wire: RedisWire, prefix: str) -> None:
        self._wire, self._prefix = wire, prefix

    def channel(self, replica: str | None) -> str:
        """``replica``'s channel; None: the one every replica listens on."""
        return R.broadcast_channel(self._prefix) if replica is None else R.relay_channel(self._prefix, replica)

    async def send(self, replica: str | None, message: R.Relayed) -> bool:
        return int(await self._wire.call("PUBLISH", self.channel(replica), R.encode(message))) > 0

    async def listens(self, replica: str) -> bool:
        counts = await self._wire.call("PUBSUB", "NUMSUB", self.channel(replica))  # [channel, count]
        return len(counts) == 2 and int(counts[1]) > 0

    async def subscribe(self, replica: str) -> Subscription:
        # Named after its channel, so an operator's CLIENT LIST tells which replica's relay a connection is.
        channels = [self.channel(replica), self.channel(None)]
        return _RedisSubscription(await self._wire.subscribe(channels, name=channels[0]))


class _RedisSubscription:
    def __init__(self, subscriber: Subscriber) -> None:
        self._subscriber = subscriber

    async def messages(self) -> AsyncIterator[R.Relayed]:
        async for data in self._subscriber.messages():
            relayed = R.decode(data)
            if not isinstance(relayed, R.Drop):
                yield relayed

    async def close(self) -> None:
        self._subscriber.close()
