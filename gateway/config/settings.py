"""Gateway configuration: a frozen pydantic model (unknown keys are errors) loaded from TOML.

Every key is documented in ``config/gateway.example.toml``. A later issue adds per-peer pins; new sections are
added as new nested models so existing files keep loading.
"""

from __future__ import annotations

import tomllib
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from adapters.admission import SessionLimits
from adapters.bridge import BridgeLimits
from adapters.capabilities import BridgedFeatures
from adapters.classify import LOOPBACK_HOSTS, Policy
from gateway.config.keys import loose_values, plain, suggestion, where
from gateway.config.pins import PinsConfig, UpstreamAuthConfig, reference_problems
from gateway.config.usage import UsageConfig
from gateway.errors import GatewayError

MEMORY_STORE = "memory"  # [gateway.store] url / serve --store: the in-process store (the default)
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LimitsConfig(_Frozen):
    max_rounds: int = Field(10, ge=1)
    max_input_requests_per_round: int = Field(16, ge=1)
    client_answer_timeout_seconds: float = Field(300.0, gt=0)
    total_timeout_seconds: float = Field(900.0, gt=0)
    max_pending_per_session: int = Field(32, ge=1)
    # Bytes of the records of rounds waiting for their client, counted in the store (adapters.admission).
    max_waiting_bytes_per_principal: int = Field(32 << 20, ge=1024)
    max_waiting_bytes: int = Field(256 << 20, ge=1024)
    state_only_backoff_seconds: float = Field(0.05, ge=0)
    state_only_backoff_max_seconds: float = Field(1.0, ge=0)
    # Upstream tasks driven for legacy clients (adapters.task_poll, docs/reference/limits.md).
    max_tasks_per_session: int = Field(8, ge=1)
    task_poll_floor_seconds: float = Field(0.25, ge=0.01)
    task_poll_max_seconds: float = Field(5.0, gt=0)
    task_total_seconds: float = Field(3600.0, gt=0)

    @cached_property
    def bridge_limits(self) -> BridgeLimits:
        """Built once per (frozen) config: every forwarded request reads it."""
        return BridgeLimits(**self.model_dump())

    def to_limits(self) -> BridgeLimits:
        return self.bridge_limits


class SessionsConfig(_Frozen):
    """``[gateway.sessions]``: what clients may make the gateway hold (adapters.admission)."""

    max_sessions: int = Field(50_000, ge=1)
    max_sessions_per_principal: int = Field(20_000, ge=1)  # anonymous clients are one principal
    # Sessions of principals nobody verified yet, all together (adapters.admission); 0: verified principals only.
    max_unverified_sessions: int = Field(5_000, ge=0)
    max_initialize_bytes: int = Field(16_384, ge=256)  # clientInfo + capabilities, encoded JSON
    max_subscriptions_per_session: int = Field(256, ge=1)
    max_subscription_bytes: int = Field(16_384, ge=256)  # the session's subscribed URIs together, UTF-8
    max_cached_roots_bytes: int = Field(16_384, ge=0)
    max_header_maps_bytes: int = Field(16_384, ge=0)

    @cached_property
    def session_limits(self) -> SessionLimits:
        return SessionLimits(**self.model_dump())


class ConnectionsConfig(_Frozen):
    """``[gateway.connections]``: what one client connection may do (gateway.ops.connections)."""

    max_client_connections: int = Field(0, ge=0)  # 0: derived from RLIMIT_NOFILE at start-up
    max_request_bytes: int = Field(1_048_576, ge=1024)
    request_body_timeout_seconds: float = Field(30.0, gt=0)
    log_repeat_interval_seconds: float = Field(60.0, ge=0)  # one repeated log line per interval; 0: all
    # The WebSocket and HTTP+SSE doors (gateway.http.door): messages of one socket or stream being served at once
    # (the next frame or POST is read when one ends), and bytes waiting to be written to a client that is not
    # reading (past them its socket is closed with 1008, its stream ended).
    door_max_in_flight: int = Field(32, ge=1)
    door_max_queued_bytes: int = Field(4 << 20, ge=1024)
    # Door sessions (WebSocket, HTTP+SSE) open at once in all, each holding up to door_max_in_flight +
    # max_pending_per_session + 2 loopback connections; 0: derived from RLIMIT_NOFILE (gateway.ops.connections).
    door_max_sessions: int = Field(0, ge=0)


class StoreConfig(_Frozen):
    """``[gateway.store]``: where session records live (gateway.session.backends). No ``url`` (or ``memory``): in
    this process; ``redis://`` / ``rediss://`` / ``unix://``: a Redis that several gateway replicas can share."""

    url: str | None = None
    prefix: str = Field("mcpgw:", min_length=1)  # every key the gateway writes starts with it
    timeout_seconds: float = Field(2.0, gt=0)  # connect and command timeout: a failure is a 503 this soon
    # A saved round's lease (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): a dead replica's
    # rounds are taken over this long after its last renewal at most; renewed every third of it.
    lease_seconds: float = Field(10.0, ge=0.3)

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str | None) -> str | None:
        if url is None or url == MEMORY_STORE:
            return None
        if not url.startswith(REDIS_SCHEMES):
            raise ValueError(f"expected '{MEMORY_STORE}' or a URL starting with {', '.join(REDIS_SCHEMES)}")
        return url


class TraceConfig(_Frozen):
    """``[gateway.trace]``: translation traces (gateway.telemetry.trace). No ``file``: off, and free."""

    file: str | None = None  # JSON Lines; `serve --trace FILE` overrides it
    max_bytes: int = Field(100 << 20, ge=1024)  # past this the file moves to FILE.1 (one old file kept)
    content: bool = False  # keep arguments, sampling/elicitation content, results and requestState
    enabled: bool = True  # trace every peer's requests (a peer's [peers.trace] enabled overrides it)


class OtelConfig(_Frozen):
    """``[gateway.otel]``: OpenTelemetry spans (gateway.telemetry.otel; the ``otel`` extra). Where they go is set
    by the standard ``OTEL_*`` environment variables; which peers and whether with content, by the trace keys."""

    enabled: bool = False  # `serve --otel` sets it


class AuthConfig(_Frozen):
    """``[gateway.auth]``: the gateway as an OAuth 2.1 protected resource for every door (adapters.authz,
    gateway.auth). No ``authorization_servers``: off, and a client's token is handled as before."""

    authorization_servers: tuple[str, ...] = ()  # issuers whose access tokens are accepted (RFC 8414 metadata)
    scopes_supported: tuple[str, ...] = ()  # published in the protected-resource metadata
    required_scopes: tuple[str, ...] = ()  # every request's token must hold these; else 403 insufficient_scope
    resource_name: str | None = None  # a human-readable name in the metadata (RFC 9728 §2)
    jwks_uri: str | None = None  # with one issuer: its keys' URL instead of the one its metadata names
    leeway_seconds: float = Field(30.0, ge=0, le=300)  # clock skew allowed on exp, nbf and iat
    min_key_refresh_seconds: float = Field(30.0, ge=0)  # an unknown kid refetches the keys at most this often
    # RFC 7662 introspection for opaque (non-JWT) tokens: the endpoint and the gateway's own client there.
    introspection_endpoint: str | None = None
    introspection_client_id: str | None = None
    introspection_secret_env: str | None = None  # the environment variable holding the client secret
    introspection_cache_seconds: float = Field(60.0, ge=0)

    @property
    def enabled(self) -> bool:
        return bool(self.authorization_servers)

    @field_validator("authorization_servers", "jwks_uri", "introspection_endpoint")
    @classmethod
    def _urls(cls, value: Any) -> Any:
        for url in (value,) if isinstance(value, str) else value or ():
            if not url.startswith(("https://", "http://")):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return value


class ReverseConfig(_Frozen):
    """[gateway.reverse]: 2026-07-28 clients in front of a 2025-11-25 upstream
    (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge)."""

    max_sessions: int = Field(256, ge=1)  # pooled legacy sessions (principal x capabilities x client)
    session_idle_seconds: float = Field(300.0, gt=0)  # an unused pooled session is closed (DELETE) after this
    answer_timeout_seconds: float = Field(300.0, gt=0)  # a parked call without a retry is cancelled upstream
    max_rounds: int = Field(10, ge=1)
    max_input_requests_per_round: int = Field(16, ge=1)
    # A listen watching a task held on another replica is pushed its changes; it asks the holder again this often
    # only to learn that the holder died, or to repair a lost push (docs/design/eras.md#tasks-in-reverse).
    task_watch_recheck_seconds: float = Field(30.0, gt=0)
    # The environment variable holding the requestState key (the same on every replica); unset: a random key
    # per process, so a restart voids the states it minted.
    state_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class GatewayConfig(_Frozen):
    host: str = "127.0.0.1"
    port: int = Field(8808, ge=0, le=65535)
    upstream_url: str | None = None  # None: run the embedded core in this process
    core_config: str | None = None  # TOML file for the embedded core (modern_server.config.load_config)
    # The embedded core's database folder (default: beside the usage database; an in-memory usage store: a
    # temporary folder removed at exit), and a folder added to its anonymous workspaces (serve: --workspace,
    # default the current directory) so a client's own roots are scanned.
    state_dir: str | None = None
    # The environment variable holding the embedded core's requestState key, the same in every process on one
    # shared store (unset: a key file created once in the state folder; gateway.upstream.embedded).
    embedded_state_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    embedded_workspace: str | None = None
    embedded_access_log: bool = False  # log the embedded core's own (internal) requests too
    # The base URL clients reach the gateway at (no /mcp): the embedded core's out-of-band pages (connect_service)
    # are served on the gateway's own port and named from it. Unset: http://HOST:PORT as configured.
    public_url: str | None = None

    def public_base(self) -> str | None:
        """Where a client's user can open the gateway's pages; None when the port is not known yet (port 0)."""
        if self.public_url:
            return self.public_url.rstrip("/")
        if not self.port:
            return None
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    allowed_origins: tuple[str, ...] = ()
    session_idle_seconds: float = Field(3600.0, gt=0)
    # SIGTERM/SIGINT: how long open requests may take to end once new connections are refused and saved rounds
    # are handed over (docs/design/takeover.md#sigterm-hands-the-rounds-over); then the process exits.
    shutdown_timeout_seconds: float = Field(10.0, ge=0)
    replay_buffer_events: int = Field(256, ge=1)
    sse_retry_ms: int = Field(1000, ge=0)
    sse_keepalive_seconds: float = Field(15.0, gt=0)
    upstream_connect_timeout_seconds: float = Field(10.0, gt=0)
    upstream_read_timeout_seconds: float = Field(600.0, gt=0)
    upstream_max_connections: int = Field(100, ge=1)  # requests in flight to the upstream
    upstream_max_stream_connections: int = Field(1000, ge=1)  # listens held open there (gateway.upstream.h1)
    # Bounds on what an upstream answer can make the gateway hold (gateway.upstream.h1, adapters.sse): over one,
    # INTERNAL_ERROR data.upstream "too_large". A body read whole; one SSE event (never a stream's total); the status
    # line + headers.
    max_upstream_response_bytes: int = Field(32 << 20, ge=1024)
    max_sse_event_bytes: int = Field(8 << 20, ge=1024)
    max_upstream_header_bytes: int = Field(64 << 10, ge=1024)
    bridge_list_changed: bool = True
    bridge_subscriptions: bool = True
    # 2024-11-05 clients are served on the doors of that revision's transports (HTTP+SSE, stdio) and WebSocket; /mcp
    # (Streamable HTTP, from 2025-03-26) negotiates it only when this is true
    # (docs/design/doors.md#doors-name-their-transport-2024-11-05-is-negotiated-on-the-doors-of-its-transports).
    streamable_http_2024_11_05: bool = False
    limits: LimitsConfig = LimitsConfig()
    sessions: SessionsConfig = SessionsConfig()  # [gateway.sessions]
    connections: ConnectionsConfig = ConnectionsConfig()  # [gateway.connections]
    usage: UsageConfig = UsageConfig()  # [gateway.usage]: the migration-progress store
    store: StoreConfig = StoreConfig()  # [gateway.store]: the session store
    trace: TraceConfig = TraceConfig()  # [gateway.trace]: translation traces
    otel: OtelConfig = OtelConfig()  # [gateway.otel]: OpenTelemetry spans
    auth: AuthConfig = AuthConfig()  # [gateway.auth]: OAuth 2.1 for the doors
    # [gateway.upstream_auth]: the main upstream's credential (as [upstreams.NAME]); unset: none with
    # [gateway.auth], else the client's token (the embedded core shares the gateway's audience).
    upstream_auth: UpstreamAuthConfig = UpstreamAuthConfig()
    pins: PinsConfig = PinsConfig()  # the file's top-level [[peers]], [default_peer], [upstreams.*], [[tokens]]
    # The main upstream's era: "auto" takes the start-up probe's verdict (a 2025-era server is served in reverse,
    # adapters.reverse_wire.era_of); "2025-11-25" serves it in reverse without asking; "2026-07-28" passes through.
    upstream_era: Literal["auto", "2026-07-28", "2025-11-25"] = "auto"
    reverse: ReverseConfig = ReverseConfig()  # [gateway.reverse]

    @model_validator(mode="after")
    def _exchange_needs_verified_tokens(self) -> GatewayConfig:
        named = [(f"upstreams.{n}", u.auth) for n, u in self.pins.upstreams.items()]
        exchanging = [where for where, auth in [("gateway.upstream_auth", self.main_upstream_auth().auth), *named]
                      if auth == "token_exchange"]
        if exchanging and not self.auth.enabled:
            raise ValueError(f"{', '.join(exchanging)}: auth = \"token_exchange\" needs [gateway.auth] (only a "
                             "token the gateway verified is exchanged)")
        return self

    def main_upstream_auth(self) -> UpstreamAuthConfig:
        """The main upstream's credential: [gateway.upstream_auth], or the default (module docstring of pins)."""
        if self.upstream_auth.auth is not None:
            return self.upstream_auth
        return UpstreamAuthConfig(auth="none") if self.auth.enabled else UpstreamAuthConfig(auth="forward",
                                                                                            shares_audience=True)

    @model_validator(mode="after")
    def _auth_has_a_resource(self) -> GatewayConfig:
        if self.auth.enabled and self.public_base() is None:
            raise ValueError("[gateway.auth] needs public_url (or a fixed port): the doors' URLs are the audience "
                             "their tokens must name")
        if self.auth.introspection_endpoint and not (self.auth.introspection_client_id
                                                     and self.auth.introspection_secret_env):
            raise ValueError("[gateway.auth] introspection_endpoint needs introspection_client_id and "
                             "introspection_secret_env")
        # Claims and scopes exist only on tokens the gateway verified: without [gateway.auth] such a peer would
        # never match and such a tool never be callable.
        needing = [p.name for p in (*self.pins.peers, self.pins.default_peer) if p.by_claims or p.tool_scopes]
        if needing and not self.auth.enabled:
            raise ValueError(f"peer(s) {', '.join(needing)}: client_ids, subjects, scopes and tool_scopes need "
                             "[gateway.auth] (only a token the gateway verified has claims)")
        return self

    def policy(self, tokens: dict[str, str] | None = None) -> Policy:
        return Policy(tuple(h.lower() for h in self.allowed_hosts), tuple(self.allowed_origins),
                      int(self.session_idle_seconds * 1000), tokens or {})

    def features(self) -> BridgedFeatures:
        return BridgedFeatures(self.bridge_list_changed, self.bridge_subscriptions)


class ConfigError(GatewayError):
    """A configuration that cannot be used; the message names the file, the key path and the problem."""


def load_config(path: str | Path | None = None, **overrides: object) -> GatewayConfig:
    """Defaults, then the TOML file (``[gateway]`` and the pins sections), then CLI overrides."""
    raw: dict[str, object] = {}
    if path is not None:
        try:
            with open(path, "rb") as handle:
                raw = tomllib.load(handle)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such file") from None
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from None
    data = dict(raw.pop("gateway", {}) or {})  # type: ignore[call-overload]
    data["pins"] = with_probed_eras(raw, overrides.pop("upstream_eras", None))
    data.update({k: v for k, v in overrides.items() if v is not None})
    # Every problem of the file at once, not one per run: strict numbers and booleans, pydantic's findings, and
    # the peers' references, checked on the raw tables too (pydantic skips them when a peer has another problem).
    loose = loose_values(GatewayConfig, data)
    problems = [_said(loc, what, raw) for loc, what in loose]
    config = None
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        found = [_problem(e, raw) for e in exc.errors() if tuple(e["loc"]) not in {loc for loc, _ in loose}]
        problems += found + [p for p in _raw_references(raw) if not any(p in f for f in found)]
    if problems or config is None:
        raise ConfigError(f"{path or '(defaults)'}: {'; '.join(dict.fromkeys(problems))}")
    return config


def with_probed_eras(raw: dict[str, Any], eras: object) -> dict[str, Any]:
    """The file's tables with ``serve``'s probe verdicts (``{name: era}``) in place of each named upstream's
    ``era = "auto"`` (as ``upstream_era`` for the main one): the app and every reload serve what was found."""
    upstreams = raw.get("upstreams")
    if not isinstance(eras, dict) or not isinstance(upstreams, dict):
        return raw
    decided = {name: {**table, "era": eras[name]} for name, table in upstreams.items()
               if name in eras and isinstance(table, dict) and table.get("era", "auto") == "auto"}
    return {**raw, "upstreams": {**upstreams, **decided}} if decided else raw


def _said(loc: tuple[Any, ...], what: str, raw: dict[str, Any]) -> str:
    place = where(loc, raw)
    what = what.removeprefix(f"{place}: ")  # a peer's own validator already names the peer
    return f"{place}: {what}" if place else what


def _problem(error: Any, raw: dict[str, Any]) -> str:
    """One validation error as ``key.path: what``; an unknown key names the nearest known one."""
    loc = tuple(error["loc"])
    if error["type"] != "extra_forbidden":
        return _said(loc, plain(error), raw)
    if loc[:1] == ("pins",):  # the file's top level: the pins sections and the [gateway] table
        near = suggestion(PinsConfig, loc[1:], top_level=("gateway",))
    else:
        near = suggestion(GatewayConfig, loc)
    return _said(loc, "unknown key" + (f" (did you mean {near!r}?)" if near else ""), raw)


def _raw_references(raw: dict[str, Any]) -> list[str]:
    """:func:`reference_problems` of the file's own tables, whatever else is wrong in them."""
    tables = [p for p in raw.get("peers", ()) if isinstance(p, dict)] if isinstance(raw.get("peers"), list) else []
    default: dict[str, Any] = raw["default_peer"] if isinstance(raw.get("default_peer"), dict) else {}
    peers = [(str(t.get("name", "default" if t is default else "?")), str(t.get("upstream", "default")),
              tuple(map(str, t.get("canary", {}))) if isinstance(t.get("canary"), dict) else ())
             for t in (*tables, default)]
    upstreams = raw.get("upstreams")
    return reference_problems(peers, map(str, upstreams) if isinstance(upstreams, dict) else ())
