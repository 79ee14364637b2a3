"""The reverse bridge's shell (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge):
2026-07-28 requests served from a 2025-11-25 upstream.

It keeps the pool of legacy sessions (``adapters.reverse.plan`` decides), the parked calls (the legacy request
still open while the client answers an ``input_required``), and the sealed ``requestState``s (AES-GCM over the
claims ``adapters.reverse.Claims`` names); each call's rules are ``adapters.reverse.handle``'s, performed here.
A parked call lives in this process: its upstream connection is here. Its state names this replica, and a retry
that reaches another one is relayed here through the store (``forward``, gateway.http.reverse_bridges). So is a
request about a task kept here (its holder is recorded in the store: gateway.http.reverse_tasks), and a change of a
task kept elsewhere pushed to a listen here.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from multidict import CIMultiDict

from adapters import reverse as R
from adapters import reverse_listen as RL
from adapters import reverse_tasks as RT
from adapters import reverse_watch as RW
from adapters import reverse_wire as W
from adapters.credentials import Grant, Refusal, after_refusal
from adapters.errors import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    ErrorValue,
    UpstreamFault,
    passthrough_ended,
    upstream_failure,
)
from adapters.jsonwire import loads, members
from adapters.protocol import MRTR_METHODS, NAME_PARAM
from adapters.relay import ReplyTo
from adapters.sse import encode_event
from adapters.upstream import header_map_of, learned_header_maps
from adapters.usage import RelayedAnswer
from gateway.auth.credentials import CredentialError, UpstreamCredentials
from gateway.http.passthrough import Passthroughs
from gateway.http.reverse_tasks import Forward, ReverseTasks
from gateway.http.streams import json_response
from gateway.session.runtime import log
from gateway.upstream.h1 import H1Pool
from gateway.upstream.legacy_session import BROKE, GONE, LegacyFailure, LegacySession, Message, SessionGone

_AAD = b"mcp-legacy-gateway reverse requestState v1"


class Watch(Protocol):
    """What usage accounting hears of one request (gateway.telemetry.reverse.ReverseWatch)."""

    def asked(self, requests: Mapping[str, Any]) -> None: ...
    def ended(self, error: ErrorValue | None, cancelled: bool = False) -> None: ...
    def done(self, response: web.StreamResponse) -> None: ...

_FAILURES = (LegacyFailure, aiohttp.ClientError, TimeoutError, ValueError)
# The grants whose credential is made from the client's own token: only these see it (a pooled session keeps the
# token of the request that opened it, its principal's; the others never hold one).
_CLIENT_GRANTS = frozenset({Grant.FORWARD, Grant.TOKEN_EXCHANGE})
# A bound on the tools/list pages read to learn x-mcp-header annotations: a server that pages forever is not
# followed forever (tools on later pages go unchecked).
_TOOL_PAGES = 20
# What a 2025 request and its answer carry that matters between client and server (2025-11-25 basic/transports).
_LEGACY_HEADERS = frozenset({"accept", "content-type", "mcp-session-id", "mcp-protocol-version", "last-event-id",
                             "authorization", "traceparent", "tracestate", "baggage"})
# aiohttp's client, which the sessions' POSTs used before gateway.upstream.h1, had no read timeout: a call's POST
# stays open while the server works or waits for its client's answer (``answer_timeout_seconds``), for as long as that.
_NO_READ_TIMEOUT = 10.0 ** 9
_ANSWER_HEADERS = frozenset({"content-type", "mcp-session-id", "www-authenticate", "cache-control", "allow"})


@dataclass(frozen=True, slots=True)
class ReverseSettings:
    url: str
    pool: R.PoolLimits = field(default_factory=R.PoolLimits)
    call: R.CallLimits = field(default_factory=R.CallLimits)
    answer_timeout_seconds: float = 300.0
    max_event_bytes: int = 8 << 20
    connect_timeout_seconds: float = 10.0
    state_key: bytes | None = None  # None: a random key of this process (a restart voids open states)
    max_connections: int = 100  # short exchanges in flight to the upstream (answers, initialize, subscribe)
    max_stream_connections: int = 1000  # calls in progress or parked, GET streams
    name: str = "default"  # the upstream's name (``[upstreams.NAME]``; "default": --upstream)
    replica: str = ""  # this gateway replica's id: the states it mints name it
    # A listen's tasks kept on other replicas: their changes are pushed to it; their holders are asked again only
    # this often, the safety net for a holder that died or a push that was lost (docs/design/eras.md#tasks-in-reverse).
    watch_recheck_seconds: float = 30.0


class Sealer:
    """``requestState`` = base64url(nonce || AES-GCM(claims)): opaque to the client, tamper-evident here."""

    def __init__(self, key: bytes | None) -> None:
        self.aead = AESGCM(hashlib.sha256(key).digest() if key is not None else AESGCM.generate_key(256))

    def seal(self, claims: R.Claims) -> str:
        return self.seal_bytes(claims.encode(), _AAD)

    def unseal(self, token: object) -> R.Claims | None:
        raw = self.open_bytes(token, _AAD)
        return R.decode_claims(raw) if raw is not None else None

    def seal_bytes(self, plain: bytes, aad: bytes) -> str:
        nonce = os.urandom(12)
        return base64.urlsafe_b64encode(nonce + self.aead.encrypt(nonce, plain, aad)).decode()

    def open_bytes(self, token: object, aad: bytes) -> bytes | None:
        if not isinstance(token, str):
            return None
        try:
            raw = base64.urlsafe_b64decode(token.encode("ascii"))
            # Only the canonical spelling: base64 ignores a last character's spare bits, so a token changed there
            # would decode to the same sealed bytes and pass as untouched.
            if base64.urlsafe_b64encode(raw).decode() != token:
                return None
            return self.aead.decrypt(raw[:12], raw[12:], aad)
        except (InvalidTag, binascii.Error, ValueError, UnicodeEncodeError):
            return None


@dataclass(eq=False)
class Pooled:
    session: LegacySession
    opened: asyncio.Task[Mapping[str, Any]]
    last_used_ms: int
    busy: int = 0
    calls: dict[str, Call] = field(default_factory=dict)  # in progress on it: the GET stream's requests go there
    listens: set[asyncio.Queue[Message | None]] = field(default_factory=set)  # its GET stream's changes go there
    watched: dict[str, int] = field(default_factory=dict)  # URIs it subscribed to, by listens watching each
    log_level: str | None = None  # what its last logging/setLevel said
    # The x-mcp-header maps of its server's tools (adapters.upstream.learned_header_maps); None: not learned yet,
    # or the server said its tools changed since.
    header_maps: dict[str, Any] | None = None
    task_support: dict[str, RT.Support] | None = None  # each tool's execution.taskSupport, learned with those


@dataclass(eq=False)
class Call:
    ident: str
    pooled: Pooled
    upstream_id: str
    queue: asyncio.Queue[Message]
    reader: asyncio.Task[None]
    state: R.CallState
    claims: R.Claims  # what its states bind (call, principal, method, name, digest); round/expiry per state
    timer: asyncio.TimerHandle | None = None
    busy: bool = False  # a request of its client drives it now: no other may
    request: web.Request | None = None  # that request, while it drives the call
    token: Any = None  # that request's progressToken
    stream: web.StreamResponse | None = None  # its SSE answer, once a notification needed one
    answered: bool = False  # the server's answer came: its reader only lets the stream end (the connection is kept)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def answer(ident: Any, result: Any = None, error: ErrorValue | None = None) -> web.Response:
    if error is not None:
        return json_response({"jsonrpc": "2.0", "id": ident, "error": error.to_wire()}, W.modern_status(error.code))
    return json_response({"jsonrpc": "2.0", "id": ident, "result": result})


class ReverseBridge:
    """One legacy upstream served to 2026-07-28 clients."""

    def __init__(self, settings: ReverseSettings) -> None:
        self.settings, self.sealer = settings, Sealer(settings.state_key)
        self.pool: dict[R.PoolKey, Pooled] = {}
        self.parked: dict[str, Call] = {}
        self.http: aiohttp.ClientSession | None = None
        self.streams: aiohttp.ClientSession | None = None
        self.posts: H1Pool | None = None  # the sessions' requests and answers (LegacySession ``posts``)
        self.reaper: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[Any]] = set()  # timers' and GET-stream refusals' work, kept until done
        # Relays a retry to the replica its state names (gateway.http.reverse_bridges): its JSON-RPC answer, or
        # None when that replica is gone. None: no shared store, so no other replica.
        self.forward: Forward | None = None
        # The upstream's credential (``[gateway.upstream_auth]`` / ``[upstreams.NAME] auth``), the one its forward
        # client holds (gateway.http.reverse_bridges); None: none is sent.
        self.credentials: Callable[[], UpstreamCredentials | None] = lambda: None
        # 2026 tasks on the server's 2025 tasks (docs/design/eras.md#tasks-in-reverse)
        self.legacy_tasks = ReverseTasks(upstream=settings.name, replica=settings.replica)
        self.legacy_tasks.forward = self._forward_any

    def spawn(self, step: Any) -> None:
        task = asyncio.create_task(step)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def start(self) -> None:
        self.begin()

    def begin(self) -> None:
        """:meth:`start`, from code running in the event loop that cannot wait (a reload's signal handler)."""
        timeout = aiohttp.ClientTimeout(sock_connect=self.settings.connect_timeout_seconds)
        settings = self.settings
        self.http = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(
            limit=settings.max_connections))
        self.streams = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(
            limit=settings.max_stream_connections))
        self.posts = H1Pool(settings.url, connect_timeout=settings.connect_timeout_seconds,
                            read_timeout=_NO_READ_TIMEOUT, limit=settings.max_connections,
                            stream_limit=settings.max_stream_connections)
        self.reaper = asyncio.create_task(self._reap())

    async def close(self) -> None:
        if self.reaper is not None:
            self.reaper.cancel()
        for call in list(self.parked.values()):
            await self._feed(call, R.AnswerTimedOut(call.state.round))
        await self.legacy_tasks.close()
        await asyncio.gather(*(self._drop(key) for key in list(self.pool)), return_exceptions=True)
        for http in (self.http, self.streams):
            if http is not None:
                await http.close()
        if self.posts is not None:
            await self.posts.close()

    # --- the pool ---------------------------------------------------------------------------------------
    async def _reap(self) -> None:
        every = max(0.05, min(self.settings.pool.idle_seconds / 4, 30.0))
        while True:
            await asyncio.sleep(every)
            for key in R.expired(self._entries(), now_ms(), self.settings.pool):
                await self._drop(key)

    def upstreams(self) -> dict[tuple[str, str], int]:
        """The pool's open sessions by the legacy server's name and the revision it speaks (telemetry: which
        legacy servers are behind the gateway)."""
        out: dict[tuple[str, str], int] = {}
        for pooled in self.pool.values():
            info = pooled.session.initialized.get("serverInfo")
            if pooled.opened.done() and isinstance(info, Mapping):
                key = (str(info.get("name", "")), pooled.session.version)
                out[key] = out.get(key, 0) + 1
        return out

    def _entries(self) -> dict[R.PoolKey, R.Entry]:
        return {k: R.Entry(p.last_used_ms, p.busy) for k, p in self.pool.items()}

    async def _drop(self, key: R.PoolKey) -> None:
        pooled = self.pool.pop(key, None)
        if pooled is not None:
            await pooled.session.close()

    async def authorization(self, client: str | None) -> str | None:
        """The ``Authorization`` value for the upstream, as the forward ``UpstreamClient`` sends it: never the
        client's token unless the upstream shares the gateway's audience (``forward``, gateway.config.pins)."""
        credentials = self.credentials()
        if credentials is None:
            return None
        try:
            return await credentials.header(client if credentials.grant in _CLIENT_GRANTS else None)
        except CredentialError as exc:
            raise LegacyFailure(str(exc)) from None

    def _authorize(self, client: str | None) -> Callable[[], Awaitable[str | None]]:
        credentials = self.credentials()
        kept = client if credentials is not None and credentials.grant in _CLIENT_GRANTS else None
        return lambda: self.authorization(kept)

    def _refused(self, client: str | None) -> Callable[[], bool]:
        """For a pooled session: :meth:`refused` with the token its credential is made from."""
        credentials = self.credentials()
        kept = client if credentials is not None and credentials.grant in _CLIENT_GRANTS else None
        return lambda: self.refused(kept)

    def refused(self, client: str | None) -> bool:
        """The server answered 401 to the credential :meth:`authorization` gave for ``client``: True when the
        gateway obtained it (client credentials, token exchange), which is then forgotten so that the request is
        sent once more with a fresh one (``adapters.credentials.after_refusal``, as ``UpstreamClient.post``); a
        static or forwarded credential is not retried, its 401 is the answer."""
        credentials = self.credentials()
        if credentials is None or after_refusal(401, (), credentials.grant, retried=False) is not Refusal.RETRY:
            return False
        credentials.forget(client if credentials.grant in _CLIENT_GRANTS else None)
        return True

    async def _session(self, key: R.PoolKey, req: W.Request, client: str | None = None) -> Pooled | ErrorValue:
        """The key's session, opened (``initialize``) on first use; other keys' idle sessions make room."""
        decision = R.plan(self._entries(), key, self.settings.pool)
        if isinstance(decision, R.Full):
            return decision.error
        for old in decision.evict if isinstance(decision, R.Open) else ():
            await self._drop(old)
        pooled = self.pool.get(key)
        if pooled is None:
            assert self.http is not None, "the bridge was started"
            session = LegacySession(self.http, self.settings.url, self.settings.max_event_bytes, streams=self.streams,
                                    authorize=self._authorize(client), refused=self._refused(client),
                                    posts=self.posts)
            opened = asyncio.create_task(session.open(W.initialize_params(req.capabilities, req.client_info)))
            pooled = self.pool[key] = Pooled(session, opened, now_ms())
            session.on_unrelated = lambda message: self._unrelated(pooled, message)
            session.on_notified = lambda message: self._changed(pooled, message)
        try:
            await asyncio.shield(pooled.opened)
        except (*_FAILURES, SessionGone) as exc:
            self.pool.pop(key, None)
            return upstream_failure(UpstreamFault.INITIALIZE, str(exc) or type(exc).__name__)
        pooled.last_used_ms = now_ms()
        return pooled

    def _unrelated(self, pooled: Pooled, message: Message) -> None:
        """A server request of the GET stream goes to the session's one call in progress, else it is refused."""
        owner = R.owner_of_unrelated(list(pooled.calls))
        if owner is not None:
            pooled.calls[owner].queue.put_nowait(message)
            return
        error = {"code": INTERNAL_ERROR, "message": "no request of this session is in progress to ask its client"}
        self.spawn(_quietly(pooled.session.respond(message["id"], error=error)))

    def _changed(self, pooled: Pooled, message: Message | None) -> None:
        """A notification of the GET stream goes to each listen of the session; None (it ended) ends them. A task's
        status goes to the tasks (docs/design/eras.md#tasks-in-reverse)."""
        if message is not None:
            self.legacy_tasks.heard(pooled, message)
        if message is not None and message.get("method") == "notifications/tools/list_changed":
            pooled.header_maps = pooled.task_support = None  # learned again on the next call
        for queue in pooled.listens:
            queue.put_nowait(message)

    # --- 2025 clients: relayed as they are ---------------------------------------------------------------
    async def relay_legacy(self, request: web.Request, body: bytes,
                           session: tuple[str | None, Callable[[str], str]] = (None, str),
                           scan: Callable[[int, bool], RelayedAnswer] | None = None) -> web.StreamResponse:
        """A 2025-era request passed to the legacy server and its answer streamed back (sessions, live requests
        and the GET stream are the server's own), with the upstream's credential in place of the client's token
        (:meth:`authorization`). ``session``: the server's session id to send instead of the client's, and how
        the server's id in the answer is given to the client (gateway.http.reverse_bridges seals it). ``scan``:
        made with the answer's status and whether it streams (SSE), it reads the answer's bytes as they pass
        (usage accounting, ``adapters.usage.RelayedAnswer``)."""
        assert self.streams is not None, "the bridge was started"
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in _LEGACY_HEADERS and k.lower() not in ("mcp-session-id", "authorization")}
        if session[0] is not None:
            headers["Mcp-Session-Id"] = session[0]
        client = request.headers.get("authorization")
        up: aiohttp.ClientResponse | None = None
        for retried in (False, True):  # a 401 to a credential the gateway obtained: once more with a fresh one
            try:
                credential = await self.authorization(client)
            except LegacyFailure as exc:
                error = upstream_failure(UpstreamFault.CREDENTIAL, str(exc))
                return json_response({"jsonrpc": "2.0", "id": None, "error": error.to_wire()}, 502)
            headers.pop("Authorization", None)
            if credential:
                headers["Authorization"] = credential
            try:
                up = await self.streams.request(request.method, self.settings.url, data=body or None,
                                                headers=headers, allow_redirects=False)
            except _FAILURES as exc:
                error = upstream_failure(UpstreamFault.UNREACHABLE, str(exc) or type(exc).__name__)
                return json_response({"jsonrpc": "2.0", "id": None, "error": error.to_wire()}, 502)
            if up.status != 401 or retried or not self.refused(client):
                break
            async with up:
                await up.read()  # small, and read whole so the connection goes back to the pool
        assert up is not None
        async with up:
            kept = {k: (session[1](v) if k.lower() == "mcp-session-id" else v) for k, v in up.headers.items()
                    if k.lower() in _ANSWER_HEADERS}
            out = web.StreamResponse(status=up.status, headers=kept)
            await out.prepare(request)
            seen = scan(up.status, up.content_type == "text/event-stream") if scan is not None else None
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientError):
                async for chunk in up.content.iter_any():
                    if seen is not None:
                        seen.feed(chunk)
                    await out.write(chunk)
            return out

    # --- requests ---------------------------------------------------------------------------------------
    async def handle(self, request: web.Request, principal: str, message: Mapping[str, Any],
                     relays: Passthroughs, watch: Watch | None = None) -> web.StreamResponse:
        """One 2026-07-28 request; ``relays`` notice its client's hang-up and end it at shutdown; ``watch``
        (usage accounting) hears of its round and outcome, and records it once answered."""
        response = await self._answer(request, principal, message, relays, watch)
        if watch is not None:
            watch.done(response)
        return response

    async def _answer(self, request: web.Request, principal: str, message: Mapping[str, Any],
                      relays: Passthroughs, watch: Watch | None) -> web.StreamResponse:
        req = W.validate(request.headers, message, None)
        if isinstance(req, W.Refused):
            return answer(message.get("id"), error=req.error)
        if req.method in MRTR_METHODS and "requestState" in req.params:
            return await self._retry(request, req, principal, relays, watch)
        key = R.pool_key(principal, req.capabilities, req.client_info)
        for attempt in range(2):  # a 404 means the session ended: one new session, one more try
            pooled = await self._session(key, req, request.headers.get("authorization"))
            if isinstance(pooled, ErrorValue):
                return answer(req.ident, error=pooled)
            caps = pooled.session.initialized.get("capabilities")
            if not W.gated_open(req.method, caps if isinstance(caps, Mapping) else {}):
                return answer(req.ident, error=ErrorValue(METHOD_NOT_FOUND, f"method not found: {req.method}"))
            if req.method == "server/discover":
                return answer(req.ident, RT.discover(W.discover_result(pooled.session.initialized), caps))
            if req.method in RT.METHODS:
                handled = await self.legacy_tasks.handle(req, principal, RT.offered(caps))
                if isinstance(handled, RT.Elsewhere):
                    return await self._task_elsewhere(handled.replica, request, req, principal)
                return answer(req.ident, *handled)
            try:
                if req.method == "subscriptions/listen":
                    return await self._listen(request, pooled, req, relays, principal)
                await self._set_level(pooled, req.log_level)
                refused = await self._param_headers(pooled, request.headers, req)
                if refused is not None:
                    return answer(req.ident, error=refused.error)
                if req.method == "tools/call":  # as a task? (docs/design/eras.md#tasks-in-reverse)
                    tool = str(req.params.get("name"))
                    runs = RT.dispatch(RT.offered(caps), RT.declared(req.capabilities),
                                       RT.support_of(pooled.task_support, tool))
                    if runs is RT.Dispatch.REFUSE:
                        return answer(req.ident, error=RT.required_error(tool))
                    if runs is RT.Dispatch.TASK:
                        result, error = await self.legacy_tasks.create(pooled, req, principal)
                        return answer(req.ident, result, error)
                return await self._relay(request, pooled, req, principal, relays, watch)
            except SessionGone:  # 2025-11-25 basic/transports §Session Management: 404 -> initialize again
                if attempt:
                    break
                await self._drop(key)
        return answer(req.ident, error=upstream_failure(UpstreamFault.SESSION, "the upstream session ended"))

    async def _relay(self, request: web.Request, pooled: Pooled, req: W.Request, principal: str,
                     relays: Passthroughs, watch: Watch | None) -> web.StreamResponse:
        upstream_id = pooled.session.new_id()
        body = {"jsonrpc": "2.0", "id": upstream_id, "method": req.method, "params": W.legacy_params(req.params)}
        queue, reader = pooled.session.request(body)
        name = str(req.params.get(NAME_PARAM.get(req.method, "name"), ""))
        claims = R.Claims(uuid.uuid4().hex, 0, principal, req.method, name, R.digest(req.params), 0,
                          self.settings.replica)
        state = R.start(req.method, req.capabilities, self.settings.call, req.log_level)
        call = Call(claims.call, pooled, upstream_id, queue, reader, state, claims)
        pooled.busy += 1
        pooled.calls[call.ident] = call
        return await self._drive(request, relays, call, req, watch)

    async def _retry(self, request: web.Request | None, req: W.Request, principal: str,
                     relays: Passthroughs | None, watch: Watch | None) -> web.StreamResponse:
        """A retry's state must name a parked call waiting for exactly this round, for this very request; one
        parked on another replica is relayed there."""
        claims = self.sealer.unseal(req.params.get("requestState"))
        call = self.parked.get(claims.call) if claims is not None else None
        waiting = call is not None and not call.busy and call.state.phase is R.Phase.WAITING
        name = str(req.params.get(NAME_PARAM[req.method], ""))
        expected = R.Claims(claims.call if claims else "", call.state.round if call and waiting else -1, principal,
                            req.method, name, R.digest(req.params), 0)
        holder = R.held_elsewhere(claims, self.settings.replica)
        if claims is not None and holder is not None and request is not None:
            return await self._retry_elsewhere(holder, request, req, claims, R.relayed_claims(claims, expected),
                                               principal, watch)
        error = R.check_claims(claims, expected, now_ms())
        if error is not None or call is None:
            return answer(req.ident, error=error)
        call.busy = True
        if call.timer is not None:
            call.timer.cancel()
        with contextlib.suppress(SessionGone):  # the call's session is gone: answering it says so
            await self._set_level(call.pooled, req.log_level)
        responses = req.params.get("inputResponses")
        retried = R.Retried(responses if isinstance(responses, Mapping) else {}, req.log_level)
        return await self._drive(request, relays, call, req, watch, retried)

    async def _retry_elsewhere(self, holder: str, request: web.Request, req: W.Request, claims: R.Claims,
                               expected: R.Claims, principal: str, watch: Watch | None) -> web.StreamResponse:
        """A retry of a call parked on replica ``holder``: checked here on all its state binds but the round, then
        relayed there; the holder's answer is this request's (what the holder's call says meanwhile is not)."""
        error = R.check_claims(claims, expected, now_ms())
        said = None
        if error is None and self.forward is not None:
            heard = {k: v for k, v in request.headers.items() if k.lower() in W.ROUTING_HEADERS}
            message = {"jsonrpc": "2.0", "id": req.ident, "method": req.method, "params": dict(req.params)}
            said = await self.forward(holder, {"upstream": self.settings.name, "principal": principal,
                                               "headers": heard, "request": message})
        if said is None:
            if error is None:
                log.info("reverse bridge: a retry of a call parked on replica %s, which is gone", holder)
                error = R.holder_gone()
            if watch is not None:
                watch.ended(error)
            return answer(req.ident, error=error)
        if watch is not None:
            _heard(watch, said)
        wire = said.get("error")
        return json_response(dict(said), W.modern_status(wire["code"]) if isinstance(wire, Mapping) else 200)

    async def _task_elsewhere(self, holder: str, request: web.Request, req: W.Request,
                              principal: str) -> web.StreamResponse:
        """A request about a task of this principal kept on replica ``holder`` (docs/design/eras.md#tasks-in-reverse):
        relayed there, its answer this request's; a holder that is gone took the task with it."""
        heard = {k: v for k, v in request.headers.items() if k.lower() in W.ROUTING_HEADERS}
        message = {"jsonrpc": "2.0", "id": req.ident, "method": req.method, "params": dict(req.params)}
        said = await self._forward_to(holder, principal, heard, message)
        if said is None:
            log.info("reverse bridge: a %s for a task kept on replica %s, which is gone", req.method, holder)
            return answer(req.ident, error=RT.holder_gone())
        wire = said.get("error")
        return json_response(dict(said), W.modern_status(wire["code"]) if isinstance(wire, Mapping) else 200)

    async def _forward_to(self, holder: str, principal: str, headers: Mapping[str, str],
                          message: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if self.forward is None:
            return None
        return await self.forward(holder, {"upstream": self.settings.name, "principal": principal,
                                           "headers": dict(headers), "request": dict(message)})

    async def _forward_any(self, holder: str, payload: dict[str, Any]) -> Mapping[str, Any] | None:
        return await self.forward(holder, payload) if self.forward is not None else None

    async def retry_relayed(self, relayed: Mapping[str, Any]) -> Mapping[str, Any]:
        """A retry another replica relayed here (:meth:`_retry_elsewhere`): run as if its client had sent it
        here, without a stream (the answer goes back whole); its JSON-RPC answer. A request about a task kept here
        (:meth:`_task_elsewhere`) is answered by the tasks, never relayed on; a task's change pushed for a listen
        here (:meth:`_watch_elsewhere`) is delivered to it."""
        if RW.NOTIFY in relayed:
            return self.legacy_tasks.notified(relayed)
        message, headers = relayed.get("request"), relayed.get("headers")
        if not isinstance(message, Mapping) or not isinstance(headers, Mapping) or "method" not in message:
            return {"jsonrpc": "2.0", "id": None, "error": R.holder_gone().to_wire()}
        req = W.validate(CIMultiDict(headers), message, None)
        if not isinstance(req, W.Refused) and req.method in RT.METHODS:
            # the relaying replica gated it on the same server's capabilities: it offers tasks
            return await self.legacy_tasks.relayed(req, str(relayed.get("principal", "")), RW.watch_of(relayed))
        if isinstance(req, W.Refused) or "requestState" not in req.params or req.method not in MRTR_METHODS:
            error = req.error if isinstance(req, W.Refused) else R.holder_gone()
            return {"jsonrpc": "2.0", "id": message.get("id"), "error": error.to_wire()}
        response = await self._retry(None, req, str(relayed.get("principal", "")), None, None)
        assert isinstance(response, web.Response) and isinstance(response.body, bytes), "no stream without a request"
        return dict(loads(response.body))

    async def _drive(self, request: web.Request | None, relays: Passthroughs | None, call: Call, req: W.Request,
                     watch: Watch | None, first: R.Event | None = None) -> web.StreamResponse:
        """Run the call until it asks the client or ends; the client's hang-up (or shutdown) cancels it. Without
        a request (a retry relayed from another replica) nothing is streamed."""
        relay = relays.relay(request) if relays is not None and request is not None else contextlib.nullcontext()
        call.request, call.stream, call.token = request, None, _progress_token(req)
        outcome: R.AskClient | R.Finish | None = None
        try:
            with relay:
                outcome = await self._feed(call, first) if first is not None else None
                outcome = outcome or await self._run(call)
        except SessionGone:  # before the server took the call: the caller opens a new session and sends it again
            self._end(call)
            raise
        except asyncio.CancelledError:  # the server cancelled the handler (its client is gone): cancel upstream
            call.request = None
            self.spawn(self._gone(call, req))
            raise
        call.request = None
        if outcome is None:  # the client is gone (the 2026 cancel) or the gateway stops
            await self._gone(call, req)
            if watch is not None:
                watch.ended(None, cancelled=True)
            return await _final(call.stream, req.ident, None, passthrough_ended())
        if isinstance(outcome, R.Finish):
            if watch is not None:
                watch.ended(outcome.error)
            return await _final(call.stream, req.ident, outcome.result, outcome.error)
        if watch is not None:
            watch.asked(outcome.requests)
        return await _final(call.stream, req.ident, self._park(call, outcome))

    async def _gone(self, call: Call, req: W.Request) -> None:
        log.info("reverse bridge: %s %r ended by its client or shutdown: cancelled upstream", req.method,
                 call.claims.name)
        await self._feed(call, R.ClientGone())
        self._end(call)

    async def _run(self, call: Call) -> R.AskClient | R.Finish:
        while True:
            try:
                message = call.queue.get_nowait()
            except asyncio.QueueEmpty:
                outcome = await self._feed(call, R.Drained())
                if outcome is not None:
                    return outcome
                message = await call.queue.get()
            event = _event(call, message)
            outcome = await self._feed(call, event) if event is not None else None
            if outcome is not None:
                return outcome

    async def _feed(self, call: Call, event: R.Event) -> R.AskClient | R.Finish | None:
        """One event through the machine, its actions performed; the client's answer when there is one."""
        call.state, actions = R.handle(call.state, event)
        outcome: R.AskClient | R.Finish | None = None
        session = call.pooled.session
        for action in actions:
            match action:
                case R.AnswerServer(upstream_id, result, error):
                    try:
                        await session.respond(upstream_id, result, error.to_wire() if error else None)
                    except (*_FAILURES, SessionGone) as exc:
                        return await self._feed(call, R.UpstreamBroke(f"answering it failed: {exc}"))
                case R.CancelServer(reason):
                    params = {"requestId": call.upstream_id, "reason": reason}
                    await _quietly(session.notify("notifications/cancelled", params))
                case R.Notify(message):
                    await _quietly(self._notify(call, message))
                case R.AskClient() | R.Finish():
                    outcome = action
        if call.state.phase is R.Phase.DONE:
            self._end(call)
        return outcome

    async def _notify(self, call: Call, message: Message) -> None:
        """The request's answer turns into an SSE stream at its first notification (2026-07-28 basic/transports)."""
        relayed = R.for_request(message, call.token) if call.request is not None else None
        if relayed is None or call.request is None:
            return
        if call.stream is None:
            call.stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                                      "X-Accel-Buffering": "no"})
            await call.stream.prepare(call.request)
        with contextlib.suppress(ConnectionResetError):
            await call.stream.write(encode_event(None, relayed))

    # --- subscriptions/listen and log levels ------------------------------------------------------------
    async def _listen(self, request: web.Request, pooled: Pooled, req: W.Request,
                      relays: Passthroughs, principal: str) -> web.StreamResponse:
        """A listen stream fed by the session's GET stream, its URIs subscribed upstream while it lasts; it ends
        when its client leaves, or gracefully when the GET stream ended (adapters.reverse_listen)."""
        filt = RL.wanted(req.params)
        if isinstance(filt, ErrorValue):
            return answer(req.ident, error=filt)
        caps = pooled.session.initialized.get("capabilities")
        honour = RL.honoured(filt, caps if isinstance(caps, Mapping) else {})
        task_ids: list[str] | None = None  # the tasks extension's filter, served here (adapters.reverse_tasks)
        elsewhere: dict[str, str] = {}  # those of its tasks kept on other replicas, by holder
        if RT.TASK_IDS in filt:
            declared = RT.declared(req.capabilities)
            elsewhere = await self.legacy_tasks.elsewhere(filt[RT.TASK_IDS], principal) if declared else {}
            listened = RT.listened(filt[RT.TASK_IDS], declared,
                                   self.legacy_tasks.owned(principal) | frozenset(elsewhere))
            if isinstance(listened, ErrorValue):
                return answer(req.ident, error=listened)
            task_ids = listened
        queue: asyncio.Queue[Message | None] = asyncio.Queue()
        pooled.busy += 1
        pooled.listens.add(queue)
        taken: tuple[str, ...] = ()
        watching: asyncio.Task[None] | None = None
        try:
            pooled.session.listen()
            taken = await self._subscribe(pooled, RL.subscriptions(honour))
            told: dict[str, Any] = dict(RL.acknowledged(honour, taken))
            if task_ids is not None:
                told[RT.TASK_IDS] = task_ids
                await self.legacy_tasks.watch(queue, principal, [t for t in task_ids if t not in elsewhere])
            if elsewhere:
                watching = asyncio.create_task(self._watch_elsewhere(queue, request, req, principal, elsewhere))
            return await self._stream_listen(request, req, told, queue, relays)
        finally:
            if watching is not None:
                watching.cancel()
            self.legacy_tasks.unwatch(queue)
            pooled.listens.discard(queue)
            pooled.busy -= 1
            pooled.last_used_ms = now_ms()
            self.spawn(self._unsubscribe(pooled, taken))

    async def _watch_elsewhere(self, queue: asyncio.Queue[Message | None], request: web.Request, req: W.Request,
                               principal: str, elsewhere: Mapping[str, str]) -> None:
        """The listen's tasks kept on other replicas (docs/design/eras.md#tasks-in-reverse): each one's holder is
        asked once by a relayed ``tasks/get`` (as the listen's client would ask it) registering the listen's watch;
        the holder pushes the state it answered and every change after (gateway.http.reverse_tasks ``follow``)."""
        version, meta = request.headers.get("mcp-protocol-version", ""), members(req.params.get("_meta"))

        async def ask(holder: str, task_id: str, watch: ReplyTo) -> Mapping[str, Any] | None:
            asked = RW.asking(task_id, version, meta)
            if asked is None:
                return None
            headers, message = asked
            return await self._forward_any(holder, {"upstream": self.settings.name, "principal": principal,
                                                    "headers": headers, "request": message,
                                                    **RW.watch_member(watch)})
        await self.legacy_tasks.follow(queue, elsewhere, ask, self.settings.watch_recheck_seconds)

    async def _stream_listen(self, request: web.Request, req: W.Request, honour: Mapping[str, Any],
                             queue: asyncio.Queue[Message | None], relays: Passthroughs) -> web.StreamResponse:
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                             "X-Accel-Buffering": "no"})
        await stream.prepare(request)
        relay = relays.relay(request, "subscriptions/listen")
        with relay, contextlib.suppress(ConnectionResetError):
            await stream.write(encode_event(None, RL.ack(req.ident, honour)))
            while (message := await queue.get()) is not None:
                out = RL.delivered(honour, req.ident, message) or RT.delivered(
                    honour.get(RT.TASK_IDS, ()), req.ident, message)
                if out is not None:
                    await stream.write(encode_event(None, out))
            await _final(stream, req.ident, RL.ended(req.ident))
        return stream

    async def _subscribe(self, pooled: Pooled, uris: list[str]) -> tuple[str, ...]:
        """The URIs the session watches for this listen: each one no other listen of it watched is
        ``resources/subscribe``d first, and kept only when the server took it."""
        pooled.watched, first = RL.subscribe(pooled.watched, uris)
        refused: list[str] = []
        for uri in first:
            try:
                said = await pooled.session.call("resources/subscribe", {"uri": uri})
            except _FAILURES as exc:
                said = {"error": {"message": str(exc)}}
            if "error" in said:
                log.info("reverse bridge: the upstream refused resources/subscribe: %s", said["error"])
                refused.append(uri)
        pooled.watched, _ = RL.unsubscribe(pooled.watched, refused)
        return tuple(u for u in uris if u not in refused)

    async def _unsubscribe(self, pooled: Pooled, uris: tuple[str, ...]) -> None:
        pooled.watched, last = RL.unsubscribe(pooled.watched, uris)
        if not any(p is pooled for p in self.pool.values()):
            return  # the session was closed meanwhile: its subscriptions ended with it
        for uri in last:
            await _quietly(pooled.session.call("resources/unsubscribe", {"uri": uri}))

    async def _param_headers(self, pooled: Pooled, headers: Mapping[str, str], req: W.Request) -> W.Refused | None:
        """A ``tools/call``'s ``Mcp-Param-*`` headers against its tool's ``x-mcp-header`` annotations, which the
        gateway, as the 2026-07-28 server, must check (basic/transports §Server validation); the annotations are
        learned from the session's ``tools/list`` on its first call."""
        if req.method != "tools/call":
            return None
        if pooled.header_maps is None or pooled.task_support is None:
            pooled.header_maps = await self._learn_header_maps(pooled)
        header_map = header_map_of(pooled.header_maps, str(req.params.get("name")))
        return W.param_header_refusal(header_map, req.params.get("arguments"), headers) if header_map else None

    async def _learn_header_maps(self, pooled: Pooled) -> dict[str, Any] | None:
        """Every page of the server's ``tools/list`` (at most ``_TOOL_PAGES``); None when it could not be read:
        the call goes on unchecked, and the next one tries again."""
        maps: dict[str, Any] = {}
        supports: dict[str, RT.Support] = {}
        cursor: Any = None
        for _ in range(_TOOL_PAGES):
            try:
                said = await pooled.session.call("tools/list", {"cursor": cursor} if cursor is not None else {})
            except _FAILURES as exc:
                log.info("reverse bridge: the upstream's tools/list failed: %s", exc)
                return None
            result = said.get("result")
            if not isinstance(result, Mapping):
                return None
            maps = learned_header_maps(maps, result) or maps
            supports = RT.learned_support(supports, result)
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str):
                break
        pooled.task_support = supports
        return maps

    async def _set_level(self, pooled: Pooled, level: str | None) -> None:
        """``logging/setLevel`` on the session when the requests in progress on it want another level than its
        own (adapters.reverse_listen.level_to_set); only to a server that offers logging."""
        caps = pooled.session.initialized.get("capabilities")
        if level is None or not isinstance(caps, Mapping) or not isinstance(caps.get("logging"), Mapping):
            return
        levels = [c.state.log_level for c in pooled.calls.values() if c.state.log_level is not None]
        target = RL.level_to_set(pooled.log_level, [level, *levels])
        if target is None:
            return
        pooled.log_level = target
        try:
            said = await pooled.session.call("logging/setLevel", {"level": target})
        except _FAILURES as exc:
            said = {"error": {"message": str(exc)}}
        if "error" in said:  # its messages are still filtered here, by each request's level
            pooled.log_level = None
            log.info("reverse bridge: the upstream refused logging/setLevel: %s", said["error"])

    def _park(self, call: Call, ask: R.AskClient) -> dict[str, Any]:
        """The call waits for its client's retry (at most ``answer_timeout_seconds``): input_required."""
        seconds = self.settings.answer_timeout_seconds
        claims = replace(call.claims, round=ask.round, expires_ms=now_ms() + int(seconds * 1000))
        call.busy = False
        self.parked[call.ident] = call
        call.timer = asyncio.get_running_loop().call_later(seconds, self._expire, call, ask.round)
        return {"resultType": "input_required", "inputRequests": ask.requests,
                "requestState": self.sealer.seal(claims)}

    def _expire(self, call: Call, rnd: int) -> None:
        if not call.busy:
            log.info("reverse bridge: call %s had no retry in time: cancelled upstream", call.ident)
            self.spawn(self._feed(call, R.AnswerTimedOut(rnd)))

    def _end(self, call: Call) -> None:
        if self.parked.pop(call.ident, None) is None and call.ident not in call.pooled.calls:
            return
        call.pooled.calls.pop(call.ident, None)
        if call.answered:  # its reader ends with the stream, soon: cancelled, it would close the connection
            self.tasks.add(call.reader)
            call.reader.add_done_callback(self.tasks.discard)
        else:
            call.reader.cancel()
        if call.timer is not None:
            call.timer.cancel()
        call.pooled.busy -= 1
        call.pooled.last_used_ms = now_ms()


def _heard(watch: Watch, said: Mapping[str, Any]) -> None:
    """Usage accounting of a retry another replica answered: its round, or its outcome."""
    result, wire = said.get("result"), said.get("error")
    if isinstance(result, Mapping) and result.get("resultType") == "input_required":
        asked = result.get("inputRequests")
        watch.asked(asked if isinstance(asked, Mapping) else {})
    elif isinstance(wire, Mapping):
        watch.ended(ErrorValue(int(wire.get("code", INTERNAL_ERROR)), str(wire.get("message", "")), wire.get("data")))
    else:
        watch.ended(None)


def _progress_token(req: W.Request) -> Any:
    meta = req.params.get("_meta")
    return meta.get("progressToken") if isinstance(meta, Mapping) else None


async def _final(stream: web.StreamResponse | None, ident: Any, result: Any = None,
                 error: ErrorValue | None = None) -> web.StreamResponse:
    """The answer: a JSON body, or the last event of the SSE stream notifications opened."""
    if stream is None:
        return answer(ident, result, error)
    body = {"jsonrpc": "2.0", "id": ident, **({"error": error.to_wire()} if error else {"result": result})}
    with contextlib.suppress(ConnectionResetError):
        await stream.write(encode_event(None, body))
        await stream.write_eof()
    return stream


def _event(call: Call, message: Message) -> R.Event | None:
    if BROKE in message:
        return R.UpstreamBroke(str(message[BROKE]))
    if GONE in message:
        raise SessionGone(call.pooled.session.url)
    if "method" in message:
        params = message.get("params")
        if "id" not in message:
            return R.ServerNotified(str(message["method"]), params if isinstance(params, Mapping) else {})
        return R.ServerAsked(message["id"], str(message["method"]), params if isinstance(params, Mapping) else {})
    if message.get("id") == call.upstream_id:
        call.answered = True
        return R.ServerAnswered(message.get("result"), message.get("error"))
    return None


async def _quietly(step: Any) -> None:
    with contextlib.suppress(*_FAILURES, SessionGone):
        await step
