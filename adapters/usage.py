"""Migration-progress accounting, the pure half: what one request says about a client's migration.

Owns: the :class:`UsageRecord` built from facts the shell already knows about a finished request (never its
content: only labels, counts, an outcome and the transport it came through), deprecated-feature detection
(2026-07-28 changelog, §Deprecated), failure causes, label folding with a cardinality bound, the aggregation
key, and the report (legacy share over time, features still in use, failures by cause, days until the peer's
sunset and until 2027-07-28, a verdict).

No clock: ``today`` and timestamps are injected. Dates are ISO strings (``YYYY-MM-DD``) turned into day numbers
with integer civil-calendar arithmetic, because ``datetime`` is off limits here (sans-IO rule, like a clock).

Peers and sunsets come from the per-peer pins (the session's pins snapshot); until a request carries them the
peer is ``"default"`` and the sunset ``None`` ("no sunset set").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from adapters.doors import Transport
from adapters.errors import MISSING_REQUIRED_CLIENT_CAPABILITY
from adapters.jsonwire import loads
from adapters.sse import EventTooLarge, SseDecoder

LEGACY_REVISIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MODERN_REVISION = "2026-07-28"
# 2026-07-28 §Deprecated: the deprecated features may be removed in the first revision on or after this date.
REMOVAL_DATE = "2027-07-28"
DEFAULT_PEER = "default"
OTHER = "other"

# The order is the verdict's order: what the client must change first comes first.
FEATURES = ("legacy handshake", "HTTP+SSE transport", "2025 tasks", "sampling", "roots", "elicitation url ids",
            "includeContext", "logging/setLevel", "resources/subscribe", "ping")
INPUT_KINDS = ("sampling", "elicitation.form", "elicitation.url", "roots")
# Causes that count as *translation failures* in the report (the gateway could not carry the request over).
FAILURE_CAUSES = ("missing capability", "round cap", "client timeout", "upstream error", "sunset refusal",
                  "client refused", "gateway limit")
OUTCOMES = ("ok", "error", "cancelled")
TRANSPORTS = tuple(t.value for t in Transport)  # the door a request came through (adapters.doors)
KNOWN_METHODS = frozenset({
    "initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe", "server/discover",
    "tools/list", "tools/call", "prompts/list", "prompts/get", "resources/list", "resources/read",
    "resources/templates/list", "completion/complete", "subscriptions/listen", "tasks/get", "tasks/list",
    "tasks/result", "tasks/cancel", "tasks/update"})
_LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"
_LABEL_MAX = 64
# Well-known ``clientInfo.name`` values: the ones ``/metrics`` labels for any peer (``[gateway.usage]
# known_clients`` adds more). Apps: Claude Desktop and claude.ai, Claude Code, VS Code (and Insiders), Cursor,
# the MCP Inspector. SDK defaults, sent when the app names none: the official Python SDK ("mcp",
# mcp.client.session.DEFAULT_CLIENT_INFO), the Java SDK ("Java SDK MCP Client") and the Rust SDK ("rmcp", its
# crate name); the TypeScript, Go and Kotlin SDKs require a name.
KNOWN_CLIENTS = frozenset({
    "claude-ai", "claude-code", "Visual Studio Code", "Visual Studio Code - Insiders", "cursor-vscode",
    "mcp-inspector", "mcp", "Java SDK MCP Client", "rmcp"})


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One finished request, as labels. ``client``/``client_version`` are self-reported (display data, 2026-07-28
    basic), so they are labels for grouping only, never identity."""

    ts_ms: int
    peer: str
    client: str
    client_version: str
    era: str  # "legacy" | "modern"
    revision: str
    method: str
    translated: bool
    rounds: int = 0
    inputs: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    outcome: str = "ok"
    cause: str = ""
    sunset: str | None = None
    transport: str = Transport.STREAMABLE_HTTP.value
    labelled: bool = False  # /metrics shows ``client`` (a known name, or a configured peer's client), else other
    # The 2025-era upstream (its configured name) a request reached in reverse: a 2026 client's, bridged (era
    # modern, translated), or a 2025 client's, relayed as it is (era legacy, not translated); else "".
    upstream: str = ""

    @property
    def metric_client(self) -> str:
        return self.client if self.labelled else OTHER


# --- labels ---------------------------------------------------------------------------------------------
def clean_label(value: object) -> str:
    """A printable, length-capped label (client names are attacker-controlled strings)."""
    text = value if isinstance(value, str) else ""
    text = "".join(ch if ch.isprintable() and ch not in '"\\' else "_" for ch in text.strip())[:_LABEL_MAX]
    return text or "unknown"


@dataclass
class LabelFolder:
    """Client names as labels, bounded so that a client inventing names cannot grow the store or /metrics.

    ``known`` names (:data:`KNOWN_CLIENTS` and the operator's) are always admitted. Names seen on a configured
    peer's requests (``[[peers]]``) are admitted first come up to ``max_clients``, and so are the rest (the
    default peer's), in a pool of their own: random names on the default peer can only fill that pool. Past
    it a name folds into ``other``; ``max_versions`` versions per name likewise. The store keeps every admitted
    name (the report is per client); /metrics labels only known names and configured peers' clients
    (:attr:`UsageRecord.labelled`), every other name is ``other`` there."""

    max_clients: int = 50
    max_versions: int = 10
    max_peers: int = 100
    known: frozenset[str] = KNOWN_CLIENTS
    clients: dict[str, set[str]] = field(default_factory=dict)
    peers: set[str] = field(default_factory=set)
    pools: dict[bool, int] = field(default_factory=lambda: {False: 0, True: 0})  # admitted, by configured peer
    _memo: dict[tuple[str, str, bool], tuple[str, str, bool]] = field(default_factory=dict, repr=False)

    def client(self, name: object, version: object, configured: bool = False) -> tuple[str, str]:
        return self.labels(name, version, configured)[:2]

    def labels(self, name: object, version: object, configured: bool = False) -> tuple[str, str, bool]:
        """(name, version, whether /metrics shows the name); ``configured``: the request is a configured peer's."""
        raw = (name, version, configured) if isinstance(name, str) and isinstance(version, str) else None
        folded = self._memo.get(raw) if raw is not None else None
        if folded is None:
            folded = self._fold_client(clean_label(name), clean_label(version), configured)
            if raw is not None and len(self._memo) < 4096:  # hot path: the same few clients, again and again
                self._memo[raw] = folded
        return folded

    def _fold_client(self, name: str, version: str, configured: bool) -> tuple[str, str, bool]:
        labelled = configured or name in self.known
        if name not in self.clients:
            if name not in self.known:
                if self.pools[configured] >= self.max_clients:
                    return OTHER, OTHER, False
                self.pools[configured] += 1
            self.clients[name] = set()
        versions = self.clients[name]
        if version not in versions:
            if len(versions) >= self.max_versions:
                return name, OTHER, labelled
            versions.add(version)
        return name, version, labelled

    def peer(self, name: object) -> str:
        if isinstance(name, str) and name in self.peers:  # the hot path: an admitted peer
            return name
        label: str = clean_label(name) if name else DEFAULT_PEER
        if label not in self.peers:
            if len(self.peers) >= self.max_peers:
                return OTHER
            self.peers.add(label)
        return label

    def seed(self, known: Iterable[tuple[str, str]]) -> None:
        """Re-admit labels already in the store (after a restart) so folding stays stable across restarts."""
        for name, version in known:
            if name != OTHER:
                self.client(name, version)


def fold_method(method: object) -> str:
    return method if isinstance(method, str) and method in KNOWN_METHODS else OTHER


def fold_revision(revision: object) -> str:
    return revision if revision in LEGACY_REVISIONS or revision == MODERN_REVISION else OTHER


def fold_transport(transport: object) -> str:
    return transport if transport in TRANSPORTS else OTHER


# --- deprecated features --------------------------------------------------------------------------------
_TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})
_LEGACY_EXTRA = {"ping": ("legacy handshake", "ping"), "logging/setLevel": ("legacy handshake", "logging/setLevel"),
                 "resources/subscribe": ("legacy handshake", "resources/subscribe"),
                 "resources/unsubscribe": ("legacy handshake", "resources/subscribe")}


def legacy_request_features(method: object, params: object = None) -> tuple[str, ...]:
    """Features a legacy request itself leans on (those 2026-07-28 removed, answered locally or
    via listen: 2026-07-28 changelog).

    Every legacy request rides on the handshake session, so each one counts ``legacy handshake``; a ``tasks/*``
    request or a task-augmented ``tools/call`` (``params.task``) counts ``2025 tasks`` (2025-11-25
    basic/utilities/tasks, moved to the io.modelcontextprotocol/tasks extension in 2026-07-28)."""
    if not isinstance(method, str):
        return ("legacy handshake",)
    if method in _TASK_METHODS or (method == "tools/call" and isinstance(params, Mapping)
                                   and isinstance(params.get("task"), Mapping)):
        return ("legacy handshake", "2025 tasks")
    return _LEGACY_EXTRA.get(method, ("legacy handshake",))


def transport_features(transport: object) -> tuple[str, ...]:
    """The HTTP+SSE transport is deprecated (2025-03-26 basic/transports; formally so in 2026-07-28
    §Deprecated): every request through that door counts it, whatever revision its session speaks."""
    return ("HTTP+SSE transport",) if transport == Transport.HTTP_SSE.value else ()


def modern_request_features(params: object) -> tuple[str, ...]:
    """Deprecated 2026 features a modern request shows (2026-07-28 §Deprecated): Logging via ``_meta`` logLevel, and
    sampling/roots answers in ``inputResponses`` (recognised by the result's shape, never stored)."""
    view = params if isinstance(params, Mapping) else {}
    meta = view.get("_meta")
    found = ["logging/setLevel"] if isinstance(meta, Mapping) and _LOG_LEVEL_META in meta else []
    responses = view.get("inputResponses")
    for value in (responses.values() if isinstance(responses, Mapping) else ()):
        if isinstance(value, Mapping) and "model" in value and "role" in value:
            found.append("sampling")
        elif isinstance(value, Mapping) and isinstance(value.get("roots"), list):
            found.append("roots")
    return ordered(found)


def input_kind(entry: object) -> tuple[str | None, tuple[str, ...]]:
    """(input kind, deprecated features) of one MRTR ``inputRequests`` entry the bridge carried over."""
    if not isinstance(entry, Mapping):
        return None, ()
    method, params = entry.get("method"), entry.get("params")
    if not isinstance(params, Mapping):
        params = {}
    if method == "sampling/createMessage":
        context = params.get("includeContext")
        # includeContext other than "none" is deprecated since 2025-11-25 (2026-07-28 §Deprecated).
        return "sampling", ("sampling", "includeContext") if context not in (None, "none") else ("sampling",)
    if method == "roots/list":
        return "roots", ("roots",)
    if method == "elicitation/create":
        if params.get("mode") == "url":
            return "elicitation.url", ("elicitation url ids",)  # the gateway mints the 2025 elicitationId
        return "elicitation.form", ()
    return None, ()


_ORDERED: dict[tuple[str, ...], tuple[str, ...]] = {}


def ordered(features: Iterable[str]) -> tuple[str, ...]:
    """The known features among ``features``, in FEATURES order (memoized: a handful of combinations recur)."""
    key = features if isinstance(features, tuple) else tuple(features)
    found = _ORDERED.get(key)
    if found is None:
        wanted = set(key)
        found = tuple(f for f in FEATURES if f in wanted)
        if len(_ORDERED) < 1024:
            _ORDERED[key] = found
    return found


# --- outcome --------------------------------------------------------------------------------------------
_LIMIT_CAUSES = {"max_rounds": "round cap", "client_answer_timeout_seconds": "client timeout"}


def failure_cause(error: object) -> str:
    """The cause of an error answer, read from the structured ``data`` the adapters put on their errors."""
    if not isinstance(error, Mapping):
        return ""
    code, data = error.get("code"), error.get("data")
    if not isinstance(data, Mapping):
        data = {}
    if code == MISSING_REQUIRED_CLIENT_CAPABILITY:
        return "missing capability"
    if "sunset" in data:
        return "sunset refusal"
    if "limit" in data:
        return _LIMIT_CAUSES.get(data["limit"], "gateway limit")
    if "upstream" in data:  # adapters.errors.UpstreamFault: every upstream failure names its kind there
        return "upstream error"
    if "inputKey" in data and "clientError" in data:
        return "client refused"
    return "request error"  # the request itself was refused (bad params, unknown tool...): not a translation failure


def outcome_of(message: object) -> tuple[str, str]:
    """(outcome, cause) of a final JSON-RPC message; ``None`` (nothing was answered) means cancelled."""
    if not isinstance(message, Mapping):
        return "cancelled", ""
    if "error" in message:
        return "error", failure_cause(message.get("error"))
    return "ok", ""


# A relayed answer's JSON body longer than this is not read for its outcome (an answer, unless its status says).
RELAYED_BODY_READ = 256 * 1024
# An SSE event naming none of these cannot be a request with an input kind (:func:`input_kind`): not parsed for one.
# Not the whole method names: JSON may write their "/" escaped.
_ASKING = ("createMessage", "elicitation", "roots")


class RelayedAnswer:
    """The outcome of a 2025 request relayed as it is to a 2025-era upstream
    (docs/design/eras.md#relayed-2025-requests-are-counted-in-the-usage-report), read from its answer's bytes as they
    stream past to the client, never kept: a JSON body (up to :data:`RELAYED_BODY_READ`) is read once at the end;
    of an SSE stream only the events that may be the request's answer (they name a result or an error) or one of
    the server's requests with an input kind (sampling, elicitation, roots: 2025-11-25 client features) are read.
    Of those requests only their kinds and the features they lean on are kept (:func:`input_kind`), as a bridged
    request's are. ``ident``: the request's JSON-RPC id."""

    def __init__(self, ident: object, status: int, sse: bool, max_event_bytes: int = 0) -> None:
        self.ident, self.status = ident, status
        self.decoder = SseDecoder(max_event_bytes) if sse else None
        self.body: list[bytes] | None = [] if not sse else None
        self.size = 0
        self.final: object = None
        self.kinds: set[str] = set()
        self.leaned: set[str] = set()  # the deprecated features the server's requests lean on

    def feed(self, chunk: bytes) -> None:
        if self.final is not None:
            return
        if self.decoder is None:
            self.size += len(chunk)
            if self.body is not None and self.size <= RELAYED_BODY_READ:
                self.body.append(chunk)
            else:
                self.body = None
            return
        try:
            events = self.decoder.feed(chunk)
        except EventTooLarge:
            self.decoder = SseDecoder()  # that event is not read; the next ones are
            return
        for data in events:
            asks = '"method"' in data and any(name in data for name in _ASKING)
            if (asks or '"result"' in data or '"error"' in data) and self._answers(data, asks):
                return

    def _answers(self, data: str, asks: bool = False) -> bool:
        """Whether ``data`` is the request's answer (kept as :attr:`final`); when ``asks``, a server's request in it
        has its kind noted."""
        try:
            message = loads(data)
        except ValueError:
            return False
        if not isinstance(message, Mapping):
            return False
        if "method" not in message:
            if message.get("id") != self.ident:
                return False
            self.final = message
            return True
        if asks and "id" in message:  # a request (a notification has no id)
            kind, features = input_kind(message)
            if kind is not None:
                self.kinds.add(kind)
                self.leaned.update(features)
        return False

    def inputs(self) -> tuple[str, ...]:
        """The input kinds of the server's requests seen on the stream, in :data:`INPUT_KINDS` order."""
        return tuple(k for k in INPUT_KINDS if k in self.kinds)

    def features(self) -> tuple[str, ...]:
        """The deprecated features those requests lean on (:func:`input_kind`), in :data:`FEATURES` order."""
        return ordered(self.leaned)

    def outcome(self) -> tuple[str, str]:
        """(outcome, cause), as :func:`outcome_of`: a stream that ended without the answer was cancelled."""
        if self.body is not None and self.final is None:
            self._answers(b"".join(self.body).decode("utf-8", "replace"))
        if self.final is not None:
            return outcome_of(self.final)
        if self.status >= 400:
            return "error", ""
        return ("ok", "") if self.decoder is None else ("cancelled", "")


# --- building and aggregating ---------------------------------------------------------------------------
HOUR_MS = 3_600_000


class Facts(NamedTuple):
    """What the shell knows about a finished request; everything here is already a label or a count.

    A named tuple, not a dataclass: the request path counts facts as dict keys, and a tuple hashes and compares
    in C where a dataclass builds tuples in Python for both (docs/benchmarks.md counts what that saves)."""

    ts_ms: int
    era: str
    revision: object
    method: object
    translated: bool
    client_info: object = None
    peer: object = None
    sunset: str | None = None
    rounds: int = 0
    inputs: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    outcome: str = "ok"  # from outcome_of(final message): the message itself is never kept
    cause: str = ""
    transport: str = Transport.STREAMABLE_HTTP.value
    configured: bool = False  # the peer is one of the configured [[peers]] (not the default peer)
    upstream: str = ""  # the reverse bridge's upstream name (the report's modern clients -> legacy servers column)


def build_record(folder: LabelFolder, facts: Facts) -> UsageRecord:
    """``facts.client_info``: the clientInfo mapping, or its ``(name, version)`` pair (hashable facts)."""
    info = facts.client_info
    if isinstance(info, tuple) and len(info) == 2:
        client, version, labelled = folder.labels(*info, facts.configured)
    else:
        info = info if isinstance(info, Mapping) else {}
        client, version, labelled = folder.labels(info.get("name"), info.get("version"), facts.configured)
    return UsageRecord(facts.ts_ms, folder.peer(facts.peer), client, version, facts.era,
                       fold_revision(facts.revision), fold_method(facts.method), facts.translated, facts.rounds,
                       tuple(k for k in INPUT_KINDS if k in facts.inputs) if facts.inputs else (),
                       ordered(facts.features + transport_features(facts.transport)), facts.outcome, facts.cause,
                       facts.sunset, fold_transport(facts.transport), labelled, facts.upstream[:_LABEL_MAX])


KEY_FIELDS = ("bucket", "peer", "client", "client_version", "era", "revision", "method", "translated", "inputs",
              "features", "outcome", "cause", "transport", "upstream")


def rollup_key(record: UsageRecord, bucket_ms: int = HOUR_MS) -> tuple[int | str, ...]:
    """The aggregation key (hourly bucket + every label); the value is ``[count, rounds]``."""
    return (record.ts_ms - record.ts_ms % bucket_ms, record.peer, record.client, record.client_version,
            record.era, record.revision, record.method, int(record.translated), ",".join(record.inputs),
            ",".join(record.features), record.outcome, record.cause, record.transport, record.upstream)


def add_to_rollup(rollup: dict[tuple[int | str, ...], list[int]], record: UsageRecord, count: int = 1) -> None:
    """Count ``count`` requests that all look like ``record``."""
    slot = rollup.setdefault(rollup_key(record), [0, 0])
    slot[0] += count
    slot[1] += record.rounds * count


# --- dates (no datetime here: integer civil-calendar arithmetic, H. Hinnant's days_from_civil) -----------
DAY_MS = 86_400_000


def day_number(iso: str) -> int:
    """Days since 1970-01-01 of an ISO date ``YYYY-MM-DD``."""
    y, m, d = (int(part) for part in iso[:10].split("-"))
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146097 + (yoe * 365 + yoe // 4 - yoe // 100 + doy) - 719468


def iso_day(days: int) -> str:
    """The ISO date of a day number (inverse of :func:`day_number`)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return f"{yoe + era * 400 + (m <= 2):04d}-{m:02d}-{d:02d}"


def days_until(target: str | None, today: str) -> int | None:
    """Whole days from ``today`` to ``target`` (negative once passed); None when there is no target."""
    return None if not target else day_number(target) - day_number(today)
