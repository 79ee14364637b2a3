"""Migration-progress recording, the shell half: collects facts about finished requests, keeps an
in-memory rollup, and flushes it to SQLite off the request path.

Owns the SQLite usage store (:class:`UsageDb`: schema, upsert, retention, reads), the
per-app :class:`UsageRecorder` (label folding, rollup, Prometheus updates, and a periodic flush: a re-armed
loop timer hands each swapped-out rollup to a worker thread; armed and stopped, with a last flush, by
:func:`usage_context` in the app's ``cleanup_ctx``), and the two hooks the endpoint calls:
:func:`observe_response` (requests answered without a bridge exchange) and :class:`ExchangeObserver` (a
forwarded request, fed the bridge machine's action batches). Nothing here stores request content: only the
labels and counts of :class:`adapters.usage.UsageRecord`.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from aiohttp import web

from adapters import bridge as B
from adapters.doors import Transport
from adapters.errors import INTERNAL_ERROR
from adapters.jsonwire import ENCODED_DEPTH, loads
from adapters.task_poll import TaskOutcome
from adapters.usage import (
    DAY_MS,
    HOUR_MS,
    INPUT_KINDS,
    KEY_FIELDS,
    KNOWN_CLIENTS,
    Facts,
    LabelFolder,
    add_to_rollup,
    build_record,
    fold_method,
    fold_revision,
    input_kind,
    legacy_request_features,
    modern_request_features,
    ordered,
    outcome_of,
)
from gateway.config.usage import DEFAULT_DB, UsageConfig

log = logging.getLogger("gateway.telemetry.usage")


# --- SQLite -----------------------------------------------------------------------------------------------
_KEY_COLUMNS = ", ".join(KEY_FIELDS)
_USAGE_TABLE = f"""CREATE TABLE IF NOT EXISTS usage (
  bucket INTEGER NOT NULL, peer TEXT NOT NULL, client TEXT NOT NULL, client_version TEXT NOT NULL,
  era TEXT NOT NULL, revision TEXT NOT NULL, method TEXT NOT NULL, translated INTEGER NOT NULL,
  inputs TEXT NOT NULL, features TEXT NOT NULL, outcome TEXT NOT NULL, cause TEXT NOT NULL,
  transport TEXT NOT NULL DEFAULT 'streamable_http',
  upstream TEXT NOT NULL DEFAULT '',
  count INTEGER NOT NULL, rounds INTEGER NOT NULL, PRIMARY KEY ({_KEY_COLUMNS}))"""
_SCHEMA = f"""{_USAGE_TABLE};
CREATE INDEX IF NOT EXISTS usage_bucket ON usage (bucket);
CREATE TABLE IF NOT EXISTS peers (peer TEXT PRIMARY KEY, sunset TEXT, seen_ms INTEGER NOT NULL);
"""
_UPSERT = (f"INSERT INTO usage ({_KEY_COLUMNS}, count, rounds) VALUES ({', '.join('?' * (len(KEY_FIELDS) + 2))}) "
           f"ON CONFLICT ({_KEY_COLUMNS}) DO UPDATE SET count = count + excluded.count, "
           "rounds = rounds + excluded.rounds")


_LATER_COLUMNS = ("transport", "upstream")  # labels added after the first stores were written


def _add_label_columns(conn: sqlite3.Connection) -> None:
    """A store written before a later label (the transport: its rows came through /mcp; the reverse bridge's
    upstream: its rows name none) gets the column with its default. The columns are part of the primary key,
    which SQLite cannot alter, so the rows move to a table of the new shape, in one transaction."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(usage)")}
    if not columns or all(c in columns for c in _LATER_COLUMNS):
        return
    old = ", ".join(c for c in (*KEY_FIELDS, "count", "rounds") if c in columns)
    conn.execute("BEGIN")
    try:
        conn.execute("ALTER TABLE usage RENAME TO usage_before_labels")
        conn.execute("DROP INDEX IF EXISTS usage_bucket")
        conn.execute(_USAGE_TABLE)
        conn.execute(f"INSERT INTO usage ({old}) SELECT {old} FROM usage_before_labels")
        conn.execute("DROP TABLE usage_before_labels")
        conn.commit()
    except sqlite3.Error:
        conn.rollback()
        raise


OPEN_SECONDS = 10.0  # how long opening the usage database retries a file another process is preparing


class UsageDb:
    """One SQLite file (or ``:memory:``). Used from one thread at a time: the flush runs in a worker thread
    while the event loop never touches the connection (``check_same_thread=False`` for that hand-off)."""

    def __init__(self, path: str | None) -> None:
        self.path = path or ":memory:"
        self.conn = sqlite3.connect(self.path, check_same_thread=False, timeout=10)
        self._prepare()
        self.lock = threading.Lock()  # the flush thread and a report thread may overlap

    def _prepare(self) -> None:
        """WAL and the schema. Workers starting together open the same file at once, and SQLite answers a
        schema or journal change that meets another with "database is locked" at once, without its busy
        handler (it would deadlock): so the preparation is tried again, for up to :data:`OPEN_SECONDS`."""
        deadline = time.monotonic() + OPEN_SECONDS
        while True:
            try:
                if self.path != ":memory:":
                    self.conn.execute("PRAGMA journal_mode=WAL")  # `report` can read while `serve` writes
                _add_label_columns(self.conn)
                self.conn.executescript(_SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        with self.lock:  # a flush thread still writing finishes first
            self.conn.close()

    def write(self, rollup: dict[tuple, list[int]], peers: dict[str, tuple[str | None, int]],
              retention_days: int, now_ms: int) -> None:
        with self.lock, self.conn:
            self.conn.executemany(_UPSERT, [(*key, c, r) for key, (c, r) in rollup.items()])
            self.conn.executemany("INSERT INTO peers VALUES (?, ?, ?) ON CONFLICT (peer) DO UPDATE SET "
                                  "sunset = excluded.sunset, seen_ms = excluded.seen_ms",
                                  [(p, s, t) for p, (s, t) in peers.items()])
            self.conn.execute("DELETE FROM usage WHERE bucket < ?", (now_ms - retention_days * DAY_MS,))

    def count_rows(self, since_ms: int) -> int:
        with self.lock:
            return self.conn.execute("SELECT COUNT(*) FROM usage WHERE bucket >= ?", (since_ms,)).fetchone()[0]

    def rows(self, since_ms: int, chunk: int = 5000) -> Iterator[dict[str, Any]]:
        names = [*KEY_FIELDS, "count", "rounds"]
        with self.lock:
            cursor = self.conn.execute(f"SELECT {_KEY_COLUMNS}, count, rounds FROM usage WHERE bucket >= ?",
                                       (since_ms,))
            while batch := cursor.fetchmany(chunk):
                for values in batch:
                    yield dict(zip(names, values, strict=True))

    def sunsets(self) -> dict[str, str | None]:
        with self.lock:
            return dict(self.conn.execute("SELECT peer, sunset FROM peers").fetchall())

    def known_clients(self) -> list[tuple[str, str]]:
        """Labels already admitted, oldest first (so a restart re-admits the same ones)."""
        with self.lock:
            return self.conn.execute("SELECT client, client_version FROM usage GROUP BY client, client_version "
                                     "ORDER BY MIN(bucket)").fetchall()


# --- the recorder -----------------------------------------------------------------------------------------
class UsageRecorder:
    """Per app. The request path only counts hashable :class:`Facts` (:meth:`note`: one dict update); folding
    labels, the rollup and Prometheus counters happen in :meth:`drain`, once per distinct fact, at each flush,
    scrape and dashboard read (latency timings likewise wait there, :meth:`gateway.telemetry.metrics.Metrics.fold`)."""

    _pending: asyncio.Future[None] | None  # set by start()

    def __init__(self, config: UsageConfig, metrics: Any = None, clock_ms: Any = None,
                 session_idle_seconds: float = 3600.0) -> None:
        self.config, self.metrics = config, metrics
        self.sessions = ActiveSessions(int(session_idle_seconds * 1000))
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.folder = LabelFolder(config.max_clients, config.max_versions_per_client,
                                  known=KNOWN_CLIENTS | frozenset(config.known_clients))
        self.pending: dict[Facts, int] = {}
        self.rollup: dict[tuple, list[int]] = {}
        self.peers: dict[str, tuple[str | None, int]] = {}
        self.db: UsageDb | None = None
        self.recorded = 0

    def open(self) -> None:
        self.db = UsageDb(self.config.db)
        self.folder.seed(self.db.known_clients())  # the same names keep their labels after a restart

    def note(self, facts: Facts) -> None:
        if self.config.enabled:
            self.pending[facts] = self.pending.get(facts, 0) + 1

    def drain(self) -> None:
        pending, self.pending = self.pending, {}
        for facts, count in pending.items():
            record = build_record(self.folder, facts)
            add_to_rollup(self.rollup, record, count)
            self.peers[record.peer] = (record.sunset, record.ts_ms)
            self.recorded += count
            if self.metrics is not None:
                self.metrics.observe(record, count)
        if self.metrics is not None:
            self.metrics.fold()

    def flush_soon(self) -> asyncio.Future | None:
        """Swap the rollup out and write it in a worker thread: the event loop never waits on SQLite. A write
        that fails, or cannot even be handed to a thread (no file descriptors left), keeps its counts for the
        next flush."""
        self.drain()
        if self.db is None or not (self.rollup or self.peers):
            return None
        rollup, peers, self.rollup, self.peers = self.rollup, self.peers, {}, {}
        try:
            future = asyncio.get_running_loop().run_in_executor(None, self._write, rollup, peers)
        except Exception:
            log.exception("usage flush could not start; keeping the counts for the next flush")
            self._restore(rollup, peers)
            return None
        future.add_done_callback(self._written)
        return future

    def _write(self, rollup: dict[tuple, list[int]], peers: dict[str, tuple[str | None, int]]) -> Any:
        assert self.db is not None
        try:
            self.db.write(rollup, peers, self.config.retention_days, self.clock_ms())
        except Exception:  # sqlite3.Error, or the OS refusing a file: the counts go back, nothing is lost
            log.exception("usage flush failed; keeping the counts for the next flush")
            return rollup, peers
        return None

    def _written(self, future: asyncio.Future) -> None:
        """On the loop again: a failed write's counts go back into the rollup."""
        if future.cancelled() or future.exception() is not None or future.result() is None:
            return
        self._restore(*future.result())

    def _restore(self, rollup: dict[tuple, list[int]], peers: dict[str, tuple[str | None, int]]) -> None:
        for key, (count, rounds) in rollup.items():
            slot = self.rollup.setdefault(key, [0, 0])
            slot[0] += count
            slot[1] += rounds
        self.peers = {**peers, **self.peers}

    async def flush(self) -> None:
        future = self.flush_soon()
        if future is not None:
            await future

    def _tick(self) -> None:
        # A re-armed timer, not a long-lived task: between flushes nothing of ours runs or waits on the loop.
        # Re-armed first, so that no failure of this flush can stop every later one.
        self._timer = asyncio.get_running_loop().call_later(self.config.flush_seconds, self._tick)
        try:
            self._pending = self.flush_soon() or self._pending
        except Exception:
            log.exception("usage flush failed; the next one is still scheduled")

    def start(self) -> None:
        self.open()
        self._pending = None
        self._timer = asyncio.get_running_loop().call_later(self.config.flush_seconds, self._tick)

    async def stop(self) -> None:
        self._timer.cancel()
        if self._pending is not None and not self._pending.done():
            await asyncio.gather(self._pending, return_exceptions=True)
        await self.flush()  # what exchanges ended at shutdown still recorded
        assert self.db is not None
        self.db.close()


USAGE = web.AppKey("usage", UsageRecorder)


def usage_context(recorder: UsageRecorder):
    """A ``cleanup_ctx`` entry: open the store and arm the periodic flush; on shutdown stop it and flush last."""
    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        recorder.start()
        app[USAGE] = recorder
        try:
            yield
        finally:
            await recorder.stop()
    return lifetime


# --- hooks ------------------------------------------------------------------------------------------------
# aiohttp's typed request storage (a plain string key warns, and says nothing of the value's type).
_STARTED = web.RequestKey("usage_started", float)
_BRIDGED = web.RequestKey("usage_bridged", bool)
_RECORDED_KINDS = ("initialize", "request", "modern")
_MAX_PARSED_BODY = 256 * 1024  # bigger passthrough bodies are judged by HTTP status alone (not parsed twice)


def request_identity(gw: Any, session: Any, kind: str, principal: str,
                     params: Any, grant: Any = None) -> tuple[Any, Any, str | None]:
    """(clientInfo, peer name, sunset) of a classified request: the session's pins snapshot, else
    the pins' matching for a session-less request, else the default peer with no sunset."""
    params = params if isinstance(params, dict) else {}
    if session is not None:
        pins = getattr(session, "pins", None) or {}
        return session.client_info, pins.get("name"), pins.get("sunset")
    meta = given if isinstance(given := params.get("_meta"), dict) else {}
    info = params.get("clientInfo") if kind == "initialize" else meta.get("io.modelcontextprotocol/clientInfo")
    table = getattr(gw, "pins", None)
    if table is None:
        return info, None, None
    from adapters.peers import match_peer
    peer = match_peer(table.peers, table.default, principal, info if isinstance(info, dict) else None, grant)
    return info, peer.name, peer.sunset


def configured_peer(gw: Any, peer: Any) -> bool:
    """Whether ``peer`` (a peer's name) is one of the configured ``[[peers]]``, not the default peer: its clients'
    names are /metrics labels (adapters.usage.LabelFolder)."""
    table = getattr(gw, "pins", None)
    return table is not None and isinstance(peer, str) and any(p.name == peer for p in table.peers)


def _revision(acc: Any, message: Any) -> Any:
    if acc.session is not None:
        return acc.session.protocol_version
    params = acc.message.get("params") or {}
    if acc.kind == "initialize":
        result = message.get("result") if isinstance(message, dict) else None
        return (result or {}).get("protocolVersion", params.get("protocolVersion"))
    meta = given if isinstance(given := params.get("_meta"), dict) else {}
    return meta.get("io.modelcontextprotocol/protocolVersion", "2026-07-28")


def _final_message(response: web.StreamResponse, kind: str = "") -> Any:
    """The JSON-RPC answer of a plain JSON response (only read for its outcome); a stand-in otherwise."""
    body = getattr(response, "body", None)
    if kind != "initialize" and response.status < 400 and isinstance(body, bytes) and b'"error"' not in body:
        return {"result": None}  # no error member anywhere: an answer, without parsing it (the hot path)
    if isinstance(body, bytes) and len(body) <= _MAX_PARSED_BODY and response.content_type == "application/json":
        try:
            return loads(body, ENCODED_DEPTH)  # the gateway's own answer (adapters.jsonwire)
        except ValueError:
            pass
    if response.status >= 400:
        return {"error": {"code": INTERNAL_ERROR, "message": f"HTTP {response.status}"}}
    return {"result": None}  # an SSE passthrough: the gateway does not read modern streams


def observe_response(request: web.Request, gw: Any, acc: Any, response: web.StreamResponse,
                     bridged: bool | None = None) -> None:
    """Record a request answered without a bridge exchange (local answers, initialize, modern passthrough).
    ``bridged``: whether an exchange already counts it; by default, whether one was made for this HTTP request
    (a batch's elements share theirs, so the batch says so per element). Accounting must never break a
    request: any bug here is logged and swallowed."""
    recorder = request.app.get(USAGE)
    if recorder is None or not recorder.config.enabled:
        return
    try:
        recorder.sessions.observe(acc, response, recorder.clock_ms())
        if acc.kind in _RECORDED_KINDS and not (request.get(_BRIDGED) if bridged is None else bridged):
            _record_plain(recorder, request, gw, acc, response)
    except Exception:
        log.exception("usage accounting failed (the request itself was answered)")


def _record_plain(recorder: UsageRecorder, request: web.Request, gw: Any, acc: Any,
                  response: web.StreamResponse) -> None:
    message, legacy = _final_message(response, acc.kind), acc.kind != "modern"
    method, params = acc.message.get("method"), acc.message.get("params")
    info, peer, sunset = request_identity(gw, acc.session, acc.kind, acc.principal, params, acc.grant)
    features = legacy_request_features(method, params) if legacy else modern_request_features(params)
    era = "legacy" if legacy else "modern"
    recorder.note(facts_of(recorder.clock_ms(), era, _revision(acc, message), method, False, info, peer, sunset,
                           features=features, outcome=outcome_of(message), transport=_transport(gw, request),
                           configured=configured_peer(gw, peer)))
    if recorder.metrics is not None and _STARTED in request:
        recorder.metrics.request_seconds(era, time.perf_counter() - request[_STARTED])


def _transport(gw: Any, request: web.Request) -> str:
    """The door the request came through (``Gateway.transport``); Streamable HTTP for a gateway without doors."""
    reader = getattr(gw, "transport", None)
    return str(reader(request.headers)) if reader is not None else Transport.STREAMABLE_HTTP.value


def facts_of(now_ms: int, era: str, revision: Any, method: Any, translated: bool, info: Any, peer: Any,
             sunset: Any, rounds: int = 0, inputs: tuple[str, ...] = (), features: tuple[str, ...] = (),
             outcome: tuple[str, str] = ("ok", ""), transport: str = Transport.STREAMABLE_HTTP.value,
             configured: bool = False, upstream: str = "") -> Facts:
    """Hashable facts: the hour bucket, folded method and revision, plain-string client labels."""
    return Facts(*facts_head(now_ms, era, revision, method, translated, info, peer, sunset), rounds, inputs, features,
                 *outcome, transport, configured, upstream)


# The first eight fields of Facts: the hour, era, revision, method, translated, client labels, peer, sunset.
Head = tuple[int, str, str, str, bool, tuple[str | None, str | None], str | None, str | None]


def facts_head(now_ms: int, era: str, revision: Any, method: Any, translated: bool, info: Any, peer: Any,
               sunset: Any) -> Head:
    """The first eight fields of :class:`Facts`, all known when a request starts."""
    info = info if isinstance(info, dict) else {}
    name, version = info.get("name"), info.get("version")
    return (now_ms - now_ms % HOUR_MS, era, fold_revision(revision), fold_method(method), translated,
            (name if isinstance(name, str) else None, version if isinstance(version, str) else None),
            peer if isinstance(peer, str) else None, sunset if isinstance(sunset, str) else None)


def stamp_arrival(request: web.Request) -> None:
    """The MCP endpoint's first step: the arrival time, for the latency histograms. Not a middleware: only this
    endpoint's requests are timed, and a middleware is one more coroutine level for every request."""
    request[_STARTED] = time.perf_counter()


class ActiveSessions:
    """Legacy sessions seen by this process, by revision, for the ``active legacy sessions`` gauge: added at a
    successful initialize, touched by every session request, dropped at DELETE or after the idle timeout.

    A request can end after its session did: a GET stream's handler returns when DELETE closes the stream, and
    touching the session then would count it again for an hour. Ended ids are remembered (ids are random and
    never reused; the memory is bounded) and never touched again."""

    def __init__(self, idle_ms: int, cap: int = 100_000) -> None:
        self.idle_ms, self.cap = idle_ms, cap
        self.seen: dict[str, tuple[str, int]] = {}
        self.ended: dict[str, None] = {}  # insertion-ordered: the oldest are forgotten first

    def observe(self, acc: Any, response: web.StreamResponse, now: int) -> None:
        sid = response.headers.get("Mcp-Session-Id") if acc.kind == "initialize" else None
        if sid and len(self.seen) < self.cap:
            self.seen[sid] = (fold_revision(_revision(acc, _final_message(response, acc.kind))), now)
        elif acc.session is not None and acc.kind == "delete":
            self._end(acc.session.session_id)
        elif acc.session is not None and acc.session.session_id not in self.ended:
            self.seen[acc.session.session_id] = (acc.session.protocol_version, now)

    def _end(self, session_id: str) -> None:
        self.seen.pop(session_id, None)
        self.ended[session_id] = None
        if len(self.ended) > self.cap:
            del self.ended[next(iter(self.ended))]

    def by_revision(self, now: int) -> dict[str, int]:
        self.seen = {s: v for s, v in self.seen.items() if now - v[1] <= self.idle_ms}
        counts: dict[str, int] = {}
        for revision, _ in self.seen.values():
            counts[revision] = counts.get(revision, 0) + 1
        return counts


_GOING_ON = (B.CallUpstream, B.UpdateTask, B.Finish)  # what ends a wait for the client


class ExchangeObserver:
    """Follows one bridged request through the bridge machine's action batches (the exchange calls it with each
    batch) and records it once, when the exchange calls :meth:`done` at its end (Finish, cancellation or
    shutdown; the first round may run in the handler's task, so there is no task of its own to watch).

    Timing, from batch timestamps: an upstream round lasts from a ``CallUpstream`` batch to the next non-empty
    batch; a client wait from a batch that sent requests to the client until the batch that goes upstream again
    or finishes. Translation overhead is the rest of the request's life: the gateway's own work (classify,
    build, map results) plus scheduling."""

    def __init__(self, recorder: UsageRecorder, head: Head, features: tuple[str, ...], transport: str,
                 started: float, configured: bool = False) -> None:
        """``head``: the request's facts known at its start (:func:`facts_head`); the rest are filled in at the end, and
        the facts built from both at once (one positional tuple: no keyword binding on every request)."""
        self.recorder, self.head, self.transport, self.started = recorder, head, transport, started
        self.configured = configured  # the request's peer is a configured one (adapters.usage.Facts)
        self.calls, self.features = 0, features
        self.extra: set[str] = set()  # the features its input requests lean on
        self.inputs: set[str] = set()
        self.final: Any = None
        self.finished: float | None = None
        self.waits: list[float] = []  # upstream round latencies and client waits (seconds)
        self.rounds_s: list[float] = []
        self._upstream_since: float | None = None
        self._client_since: float | None = None
        self._recorded = False
        self._seen_round = -1

    def __call__(self, record: Any, actions: list[Any]) -> None:
        if not actions:
            return  # a partial answer: nothing starts or ends here
        now = time.perf_counter()
        if self._upstream_since is not None:
            self.rounds_s.append(now - self._upstream_since)
            self._upstream_since = None
        if self._client_since is not None and any(type(a) in _GOING_ON for a in actions):
            self.waits.append(now - self._client_since)
            self._client_since = None
        for action in actions:
            self._note(action, now)
        requests = getattr(record, "input_requests", None)
        if requests and record.round != self._seen_round:  # each round's input requests, once
            self._seen_round = record.round
            for entry in requests.values():
                kind, features = input_kind(entry)
                if kind is not None:
                    self.inputs.add(kind)
                    self.extra.update(features)

    def _note(self, action: Any, now: float) -> None:
        if isinstance(action, B.CallUpstream):
            self.calls += 1
            self._upstream_since = now
        elif isinstance(action, B.SendToClient) and "id" in action.message and self._client_since is None:
            self._client_since = now
        elif isinstance(action, B.Finish) and self.finished is None:
            self.final, self.finished = action.message, now
        elif isinstance(action, B.TaskEnded) and self.recorder.metrics is not None:
            self.recorder.metrics.task_ended(action.outcome.value)

    def done(self) -> None:
        if self._recorded:
            return
        self._recorded = True
        try:
            self._record()
        except Exception:
            log.exception("usage accounting failed for a bridged request")

    def _record(self) -> None:
        end = self.finished if self.finished is not None else time.perf_counter()
        inputs = tuple(k for k in INPUT_KINDS if k in self.inputs) if self.inputs else ()
        features = ordered((*self.features, *self.extra) if self.extra else self.features)
        self.recorder.note(Facts(*self.head, max(self.calls - 1, 0), inputs, features, *outcome_of(self.final),
                                 self.transport, self.configured))
        metrics = self.recorder.metrics
        if metrics is None:
            return
        total = end - self.started
        metrics.request_seconds("legacy", total)
        metrics.bridge_timings(self.rounds_s, max(total - sum(self.rounds_s) - sum(self.waits), 0.0))


def exchange_observer(request: web.Request, gw: Any, session: Any, message: dict[str, Any]) -> Any:
    """The observer for a request about to be bridged, or None when usage recording is off."""
    recorder = request.app.get(USAGE)
    if recorder is None or not recorder.config.enabled:
        return None
    request[_BRIDGED] = True  # observe_response must not count this request a second time
    info, peer, sunset = request_identity(gw, session, "request", session.principal, message.get("params"))
    method = message.get("method")
    head = facts_head(recorder.clock_ms(), "legacy", session.protocol_version, method, True, info, peer, sunset)
    features = legacy_request_features(method, message.get("params"))
    return ExchangeObserver(recorder, head, features, _transport(gw, request),
                            request.get(_STARTED, time.perf_counter()), configured_peer(gw, peer))


def serve_defaults(config: Any, db: str | None) -> Any:
    """``serve`` keeps history by default: ``--usage-db``, else ``[gateway.usage].db``, else the default file."""
    usage = getattr(config, "usage", None)
    if usage is None:
        return config
    return config.model_copy(update={"usage": usage.model_copy(update={"db": db or usage.db or DEFAULT_DB})})


class UsageObserver:
    """Usage accounting as the gateway's :class:`gateway.session.observer.Observer`: what the handlers used to
    call one by one (the arrival stamp, plain answers, bridged exchanges) behind the one interface."""

    def __init__(self, gw: Any, recorder: UsageRecorder | None = None) -> None:
        self.gw = gw
        self.recorder = recorder  # for the counters no request carries (a 2025 task seen ending)

    def arrived(self, request: web.Request) -> None:
        stamp_arrival(request)

    def answered(self, request: web.Request, acc: Any, answer: web.StreamResponse,
                 bridged: bool | None = None) -> None:
        observe_response(request, self.gw, acc, answer, bridged)

    def exchange(self, request: web.Request, session: Any, message: dict[str, Any]) -> Any:
        return exchange_observer(request, self.gw, session, message)

    def task_ended(self, outcome: TaskOutcome) -> None:
        """A 2025 task counted by outcome like the tasks the bridge drives (``mcp_gateway_tasks``)."""
        if self.recorder is not None and self.recorder.config.enabled and self.recorder.metrics is not None:
            self.recorder.metrics.task_ended(outcome.value)
