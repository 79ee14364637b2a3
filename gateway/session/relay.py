"""The replica relay over the store's bus (docs/design/replicas.md#replicas-relay-through-the-store): passes a client's
answer or cancel to the replica whose exchange it is for, a session's end to every replica, and a 2026 client's retry of
a reverse-bridged call to the replica it is parked on, whose answer comes back (§61).

Each replica subscribes to what the bus (``gateway.session.bus``) sends it and every replica;
:func:`relay_lifetime` runs the subscriber for the app's lifetime, only on a store whose replicas share a bus
(Redis pub/sub, or the in-process bus of ``gateway.session.store.SharedMemory``). What a message is and where it
goes are ``adapters.relay``'s decisions; this module only looks owners up, sends and delivers. A send that fails
raises :class:`~gateway.session.store.StoreUnavailable` like any store call (the client gets 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, assert_never

from adapters import local
from adapters import relay as R
from adapters.reverse import holder_gone
from gateway.session.bus import Bus, Subscription
from gateway.session.keeping import Tell
from gateway.session.runtime import Gateway
from gateway.session.store import StoreUnavailable

log = logging.getLogger("gateway")
RESUBSCRIBE_SECONDS = 1.0  # after the bus failed: how soon the subscriber tries again
HOLDER_CHECK_SECONDS = 1.0  # a relayed retry not answered yet: how often its holder's liveness is checked


class BusRelay:
    """One replica's end of the relay: :meth:`answer`/:meth:`cancel`/:meth:`ended` send, :meth:`run` receives."""

    def __init__(self, gateway: Gateway, bus: Bus) -> None:
        self.gateway, self.bus = gateway, bus
        self.own = gateway.replica  # who this end is, in the log
        self.acks: dict[str, asyncio.Future[bool]] = {}  # token -> the acknowledgement a relayed message awaits
        self.acking: set[asyncio.Task[None]] = set()  # acknowledgements to send once their message is acted on
        self.replies: dict[str, asyncio.Future[Mapping[str, Any]]] = {}  # token -> a relayed retry's answer
        # Answers a retry relayed here (gateway.http.reverse_bridges); None: no reverse bridge runs here.
        self.on_retry: Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any]]] | None = None

    async def answer(self, session_id: str, message: dict[str, Any]) -> asyncio.Future[bool] | None:
        """Pass a client's answer to the replica whose exchange asked for it: the future of that replica's
        acknowledgement (True once its step for the answer is saved; False when it held no such round), or None
        when no listening replica owns it (then maybe a takeover: gateway.session.takeover). Cancel the future to
        stop waiting."""
        key = R.answer_key(message.get("id"))
        return None if key is None else await self._relay(R.Answer, session_id, message, key=key)

    async def answer_to(self, replica: str, session_id: str, message: dict[str, Any]) -> asyncio.Future[bool] | None:
        """:meth:`answer`, to ``replica`` (the live holder of the answer's stored round)."""
        return await self._relay(R.Answer, session_id, message, replica=replica)

    async def cancel(self, session_id: str, request_id: str | int,
                     message: dict[str, Any]) -> asyncio.Future[bool] | None:
        """Pass a cancel to the replica bridging the request: the future of its acknowledgement (True once the
        request ended there), as for :meth:`answer`. A request that claimed no owner may be a plain one answered
        inline (``Exchange.begin`` claims nothing, to keep the store off every request's path): the cancel goes to
        every replica, and the one running it stops it
        (docs/design/takeover.md#a-cancel-for-a-plain-request-goes-to-every-replica); None then, as when the owner
        does not listen."""
        return await self._relay(R.Cancel, session_id, message, key=R.request_key(session_id, request_id))

    async def cancel_to(self, replica: str, session_id: str, message: dict[str, Any]) -> asyncio.Future[bool] | None:
        """:meth:`cancel`, to ``replica`` (the live holder of the request's stored round)."""
        return await self._relay(R.Cancel, session_id, message, replica=replica)

    async def _relay(self, kind: type[R.Answer | R.Cancel], session_id: str, message: dict[str, Any], *, key: str = "",
                     replica: str | None = None) -> asyncio.Future[bool] | None:
        """Relay ``message`` asking for an acknowledgement: to ``replica``, else to the owner of ``key``."""
        token = secrets.token_hex(8)
        acked = self.acks[token] = asyncio.get_running_loop().create_future()
        acked.add_done_callback(lambda _done: self.acks.pop(token, None))
        relayed = kind(session_id, message, R.ReplyTo(self.gateway.replica, token))
        try:
            passed = await (self.send(replica, relayed) if replica is not None else self._pass_on(key, relayed))
        except BaseException:
            acked.cancel()
            raise
        if not passed:
            acked.cancel()
            return None
        return acked

    async def retry(self, replica: str, message: dict[str, Any]) -> Mapping[str, Any] | None:
        """Relay a 2026 client's retry to ``replica``, where its call is parked
        (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge), or a request about a task it
        holds (docs/design/eras.md#tasks-in-reverse): that replica's JSON-RPC answer, or None when it does not
        listen, or stops listening before it answers (it died: the call or task went with it)."""
        token = secrets.token_hex(8)
        reply: asyncio.Future[Mapping[str, Any]] = asyncio.get_running_loop().create_future()
        self.replies[token] = reply
        try:
            if not await self.send(replica, R.Retry(message, R.ReplyTo(self.gateway.replica, token))):
                return None
            while not (await asyncio.wait({reply}, timeout=HOLDER_CHECK_SECONDS))[0]:
                if not await self.listens(replica):
                    return reply.result() if reply.done() else None
            return reply.result()
        finally:
            self.replies.pop(token, None)
            reply.cancel()

    async def listens(self, replica: str) -> bool:
        """Whether ``replica`` is subscribed to the bus (one that died, or lost the bus, is not)."""
        return await self.bus.listens(replica)

    async def send(self, replica: str, relayed: R.Relayed) -> bool:
        return await self.bus.send(replica, relayed)

    async def ended(self, session_id: str) -> None:
        await self.bus.send(None, R.End(session_id))

    async def _pass_on(self, key: str, relayed: R.Answer | R.Cancel) -> bool:
        """Send to the key's owner, looked up and sent to in one store step: True when a replica received it. Its
        owner not listening (it stopped, or lost the bus) is where a takeover may begin
        (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds). A cancel whose request claimed no
        owner goes to every replica (docs/design/takeover.md#a-cancel-for-a-plain-request-goes-to-every-replica)."""
        owner, received = await self.gateway.store.relay_to_owner(key, self.gateway.replica, relayed)
        decision = R.route(owner, self.gateway.replica)
        if isinstance(decision, R.Drop):
            if isinstance(relayed, R.Cancel) and decision.reason is R.DropReason.NO_OWNER:
                await self.bus.send(None, R.Cancel(relayed.session_id, relayed.message))
            return False
        if received:
            return True
        log.info("session %s: replica %s does not listen for a client's %s", relayed.session_id, decision.owner,
                 "answer" if isinstance(relayed, R.Answer) else "cancel")
        return False

    async def subscribe(self) -> Subscription:
        """This replica's subscription to the bus (raises StoreUnavailable while the bus is down). A session's end
        sent before it (while the bus was lost) never arrives here: the records kept for relayed answers go
        (``Gateway.answer_records``)."""
        subscription = await self.bus.subscribe(self.gateway.replica)
        self.gateway.answer_records.clear()
        return subscription

    async def run(self, subscription: Subscription | None) -> None:
        """Deliver every message until cancelled; while the bus is down, subscribe again every second (messages
        sent meanwhile are lost: the bus keeps nothing)."""
        try:
            while True:
                try:
                    subscription = subscription or await self.subscribe()
                    await self._listen(subscription)
                except StoreUnavailable as exc:
                    log.warning("relay %s: %s; subscribing again", self.own, exc)
                    await _close(subscription)
                    subscription = None
                    await asyncio.sleep(RESUBSCRIBE_SECONDS)
        finally:
            await _close(subscription)

    async def _listen(self, subscription: Subscription) -> None:
        async for relayed in subscription.messages():
            try:
                await self.deliver(relayed)
            except Exception:  # a bug in one delivery must not stop the relay
                log.exception("relay %s: a delivery failed", self.own)

    async def deliver(self, data: R.Relayed | bytes | str) -> None:
        """What another replica passed on (a message, or its encoded text), performed here as the replica that
        got it from the client would."""
        relayed = R.decode(data) if isinstance(data, bytes | str) else data
        match relayed:
            case R.Drop(reason):
                log.debug("relay %s: dropped a message on the bus (%s)", self.own, reason.value)
            case R.Ack(_, to, held):
                acked = self.acks.get(to.token)
                if acked is not None and not acked.done():
                    acked.set_result(held)
            case R.End(session_id):
                await self.gateway.end_runtime(session_id)
            case R.Retry():
                self._answer_retry(relayed)
            case R.Reply(message, to):
                reply = self.replies.get(to.token)
                if reply is not None and not reply.done():
                    reply.set_result(message)
            case R.Answer() | R.Cancel():
                await self._deliver_client(relayed)
            case _:
                assert_never(relayed)

    async def _deliver_client(self, relayed: R.Answer | R.Cancel) -> None:
        """A client's answer or cancel, to the exchange here it is for, acknowledged once acted on when asked."""
        if self.gateway.taking:  # a round being taken over here is relayed to as soon as its lease is won:
            # deliver once its exchange runs (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds)
            await asyncio.wait(list(self.gateway.taking.values()))
        runtime, message = self.gateway.runtimes.get(relayed.session_id), relayed.message
        if isinstance(relayed, R.Answer):
            ident = message.get("id")
            exchange = runtime.awaiting.pop(ident, None) if runtime is not None and isinstance(ident, str) else None
            if exchange is not None:  # its acknowledgement goes with its step's save, in that round trip
                ack = relayed.acked(True)
                tell = Tell(ack) if ack is not None else None
                self._acknowledge(relayed, exchange.door.answer(ident, dict(message), tell), tell)
            else:  # not awaited here: late, answered twice (ignored, as on one replica), or its round moved on
                await self._send_ack(relayed, held=False)
            return
        cancel = local.cancel_request(message.get("params"))
        exchange = runtime.exchanges.get(cancel.request_id) if runtime is not None and cancel is not None else None
        if exchange is not None and cancel is not None:
            self._acknowledge(relayed, exchange.door.cancel_acted(cancel.reason))
        else:  # not run here (any more): ended, or its round moved on
            await self._send_ack(relayed, held=False)

    def _answer_retry(self, relayed: R.Retry) -> None:
        """A relayed retry is answered in a task of its own (a parked call's next round takes as long as the
        upstream does: the relay goes on meanwhile)."""
        answering, message = self.on_retry, relayed.message

        async def answered() -> None:
            said: Mapping[str, Any] | None = None
            try:
                said = await answering(message) if answering is not None else None
            except Exception:  # the sender waits while this replica listens: it is told, whatever went wrong
                log.exception("relay %s: a relayed retry failed", self.own)
            if said is None:
                request = message.get("request")
                ident = request.get("id") if isinstance(request, Mapping) else None
                said = {"jsonrpc": "2.0", "id": ident, "error": holder_gone().to_wire()}
            await self.send(relayed.to.replica, relayed.reply(said))
        task = asyncio.get_running_loop().create_task(answered())
        self.acking.add(task)
        task.add_done_callback(self._acked)

    def _acknowledge(self, relayed: R.Answer | R.Cancel, acted: asyncio.Future[bool], tell: Tell | None = None) -> None:
        """Tell the relaying replica once the answer's step is saved (a cancel's: the request ended), or that it
        was not acted on here (the exchange ended first: handed over, say). It kept the message meanwhile: a
        replica dying before that does not lose it (docs/design/replicas.md#replicas-relay-through-the-store,
        docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds). An answer whose step's save
        already told it (``tell.sent``) needs nothing more."""
        if relayed.ack is None:
            return

        async def once_acted() -> None:
            held = await acted
            if not (held and tell is not None and tell.sent):
                await self._send_ack(relayed, held=held)
        task = asyncio.get_running_loop().create_task(once_acted())
        self.acking.add(task)
        task.add_done_callback(self._acked)

    def _acked(self, task: asyncio.Task[None]) -> None:
        """An acknowledgement not sent leaves its answer to the sender's own delivery (after its timeout)."""
        self.acking.discard(task)
        failure = None if task.cancelled() else task.exception()
        if isinstance(failure, StoreUnavailable):
            log.warning("relay %s: an acknowledgement was not sent: %s", self.own, failure)
        elif failure is not None:
            log.error("relay %s: an acknowledgement failed", self.own, exc_info=failure)

    async def _send_ack(self, relayed: R.Answer | R.Cancel, *, held: bool) -> None:
        ack = relayed.acked(held)
        if ack is not None:
            await self.send(ack.to.replica, ack)

    def close(self) -> None:
        """Stop waiting and acknowledging (the app is stopping)."""
        for task in list(self.acking):
            task.cancel()
        for acked in list(self.acks.values()):
            acked.cancel()
        for reply in list(self.replies.values()):
            reply.cancel()


async def _close(subscription: Subscription | None) -> None:
    if subscription is not None:
        with contextlib.suppress(Exception):
            await subscription.close()


@asynccontextmanager
async def relay_lifetime(gateway: Gateway) -> AsyncIterator[None]:
    """The relay for the app's lifetime when the store's replicas share a bus, else nothing. Subscribed before
    the app serves, so a replica can be reached once it answers; a bus down at start is retried."""
    bus = gateway.store.bus
    if bus is None:
        yield
        return
    relay = BusRelay(gateway, bus)
    subscription: Subscription | None
    try:
        subscription = await relay.subscribe()
    except StoreUnavailable as exc:
        log.warning("relay %s: %s; subscribing again later", relay.own, exc)
        subscription = None
    task = asyncio.get_running_loop().create_task(relay.run(subscription))
    gateway.relay = relay
    try:
        yield
    finally:
        gateway.relay = None
        relay.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
