"""The ``[[peers]]``, ``[default_peer]``, ``[upstreams.*]`` and ``[[tokens]]`` sections of the gateway config.

Validated once at start (frozen models, unknown keys refused): a duplicate peer, an unknown revision, a bad
date, a canary over 100%, a peer naming an upstream that does not exist, or an upstream whose credentials are
incoherent all fail with the key path. Secrets are never required in the file: tokens are SHA-256 digests or
environment-variable references, and the gateway's own upstream credential is an environment variable.

Token passthrough (2025-11-25 basic/security_best_practices §Token Passthrough;
docs/design/authorization.md#principal-and-token-passthrough): the client's bearer token is forwarded only to an
upstream declared to share its audience (``auth = "forward"`` with ``shares_audience = true``, e.g. the embedded
core, which checks the same tokens). Any other upstream gets the gateway's own credential (``auth = "gateway"``) or
none: passing a token minted for one audience to another is the confused-deputy pattern the spec forbids, so the
configuration refuses to express it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from adapters.peers import INPUT_KINDS, Peer
from adapters.protocol import HANDSHAKE_VERSIONS, MODERN_VERSION
from adapters.tool_policy import ToolPolicy, glob_problem, scope_problem

Revision = Literal["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
InputKind = Literal["sampling", "elicitation.form", "elicitation.url", "roots"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class UpstreamAuthConfig(_Frozen):
    """How the gateway authorizes itself to an upstream (adapters.credentials, gateway.auth.credentials): the keys
    of ``[upstreams.NAME]`` and of ``[gateway.upstream_auth]`` (the main ``--upstream``)."""

    # Unset: "none" for a named upstream; for the main one, the default of [gateway.upstream_auth] (settings).
    auth: Literal["none", "forward", "gateway", "static", "client_credentials", "token_exchange"] | None = None
    shares_audience: bool = False  # forward: the upstream accepts tokens issued for the gateway's own resource
    token_env: str | None = None  # static ("gateway" is its older name): the variable holding the token
    # client_credentials / token_exchange: the authorization server (its RFC 8414 metadata names the token
    # endpoint, unless token_endpoint is given) and the gateway's own client there (secret from client_secret_env).
    issuer: str | None = Field(None, pattern=r"^https?://")
    token_endpoint: str | None = Field(None, pattern=r"^https?://")
    client_id: str | None = None
    client_secret_env: str | None = None
    # private_key_jwt (RFC 7523) instead of a secret: a PEM private key (RSA or EC) and its kid at the server.
    client_assertion_key_file: str | None = None
    client_assertion_kid: str | None = None
    resource: str | None = Field(None, pattern=r"^https?://")  # default: the upstream's RFC 9728 resource, or URL
    scopes: tuple[str, ...] = ()  # asked for; an exchanged token never gets more than the client's token holds
    refresh_before_seconds: float = Field(60.0, ge=0)  # a token is fetched again this long before it expires

    @model_validator(mode="after")
    def _credentials_coherent(self) -> UpstreamAuthConfig:
        if self.auth == "forward" and not self.shares_audience:
            raise ValueError("auth = \"forward\" passes the client's token on; allowed only with shares_audience = "
                             "true (the upstream's metadata names the gateway's own resource); else use "
                             "token_exchange or client_credentials")
        if self.auth in ("gateway", "static") and not self.token_env:
            raise ValueError(f'auth = "{self.auth}" needs token_env (the environment variable holding the credential)')
        if self.auth in ("client_credentials", "token_exchange"):
            missing = ["client_id"] if not self.client_id else []
            if not (self.client_secret_env or self.client_assertion_key_file):
                missing.append("client_secret_env (or client_assertion_key_file)")
            if not (self.issuer or self.token_endpoint):
                missing.append("issuer (or token_endpoint)")
            if missing:
                raise ValueError(f'auth = "{self.auth}" needs {", ".join(missing)}')
        return self


class UpstreamConfig(UpstreamAuthConfig):
    url: str = Field(description='"embedded" (the in-process core) or an http(s) URL of a 2026-07-28 server')
    revision: Literal["2026-07-28"] = MODERN_VERSION
    # As the main upstream's upstream_era
    # (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge): "auto" takes serve's start-up
    # probe's verdict for this upstream; "2025-11-25" is served in reverse without asking; "2026-07-28" is passed
    # through.
    era: Literal["auto", "2026-07-28", "2025-11-25"] = "auto"
    connect_timeout_seconds: float = Field(10.0, gt=0)
    read_timeout_seconds: float = Field(600.0, gt=0)
    max_connections: int = Field(100, ge=1)
    max_stream_connections: int = Field(1000, ge=1)

    @model_validator(mode="after")
    def _coherent(self) -> UpstreamConfig:
        if self.url != "embedded" and not self.url.startswith(("http://", "https://")):
            raise ValueError('url must be "embedded" or an http(s) URL')
        if self.url == "embedded" and self.era == "2025-11-25":
            raise ValueError('era = "2025-11-25": the embedded core is a 2026-07-28 server')
        return self


class BridgePolicyConfig(_Frozen):
    input_kinds: tuple[InputKind, ...] = INPUT_KINDS  # type: ignore[assignment]
    max_rounds: int | None = Field(None, ge=1)
    answer_timeout_seconds: float | None = Field(None, gt=0)


class PeerTraceConfig(_Frozen):
    """``[peers.trace]``: this peer's translation traces and OpenTelemetry spans; unset keys follow
    ``[gateway.trace]``."""

    enabled: bool | None = None
    content: bool | None = None


class PeerConfig(_Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    principals: tuple[str, ...] = ()
    client_name: str | None = None
    client_version: str | None = None
    # Every revision: exactly the values of Revision.
    revisions: tuple[Revision, ...] = cast(tuple[Revision, ...], (*HANDSHAKE_VERSIONS, MODERN_VERSION))
    sunset: date | None = None
    deprecation_notice: str | None = None
    upstream: str = "default"
    canary: dict[str, int] = Field(default_factory=dict)
    bridge: BridgePolicyConfig = BridgePolicyConfig()
    trace: PeerTraceConfig = PeerTraceConfig()
    # Token claims ([gateway.auth]): globs of client ids and subjects, scopes all held; every kind listed must match.
    client_ids: tuple[str, ...] = ()
    subjects: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    # Tool policy (adapters.tool_policy): unset tools_allowed lets every tool not denied through.
    tools_allowed: tuple[str, ...] | None = None
    tools_denied: tuple[str, ...] = ()
    tool_scopes: dict[str, str] = Field(default_factory=dict)  # tool glob -> the scope its calls need

    @model_validator(mode="after")
    def _sane(self) -> PeerConfig:
        if not self.revisions:
            raise ValueError("revisions must list at least one revision")
        if any(p < 0 for p in self.canary.values()) or sum(self.canary.values()) > 100:
            raise ValueError("canary percentages must be >= 0 and add up to at most 100")
        problems = self._policy_problems()
        if problems:
            raise ValueError(f"peer {self.name!r}: {'; '.join(problems)}")
        return self

    def _policy_problems(self) -> list[str]:
        """Every bad glob or scope of the claim conditions and the tool policy, each with its key."""
        globs = {"client_ids": self.client_ids, "subjects": self.subjects, "tools_allowed": self.tools_allowed or (),
                 "tools_denied": self.tools_denied, "tool_scopes": tuple(self.tool_scopes)}
        problems = [f"{key}: {problem}" for key, values in globs.items() for v in values
                    if (problem := glob_problem(v)) is not None]
        scopes = {"scopes": self.scopes, "tool_scopes": tuple(self.tool_scopes.values())}
        problems += [f"{key}: {problem}" for key, values in scopes.items() for v in values
                     if (problem := scope_problem(v)) is not None]
        return problems

    @property
    def by_claims(self) -> bool:
        return bool(self.client_ids or self.subjects or self.scopes)

    def tool_policy(self) -> ToolPolicy:
        return ToolPolicy(self.tools_allowed, self.tools_denied, tuple(self.tool_scopes.items()))

    def to_peer(self) -> Peer:
        bridge = self.bridge
        return Peer(self.name, tuple(self.revisions), tuple(self.principals), self.client_name, self.client_version,
                    self.sunset.isoformat() if self.sunset else None, self.deprecation_notice, self.upstream,
                    tuple(self.canary.items()),
                    tuple(bridge.input_kinds), bridge.max_rounds, bridge.answer_timeout_seconds,
                    trace=self.trace.enabled, trace_content=self.trace.content, client_ids=self.client_ids,
                    subjects=self.subjects, scopes=self.scopes, tools=self.tool_policy())


class TokenConfig(_Frozen):
    principal: str
    token_sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    token_env: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> TokenConfig:
        if (self.token_sha256 is None) == (self.token_env is None):
            raise ValueError("give exactly one of token_sha256 or token_env")
        return self


class PinsConfig(_Frozen):
    peers: tuple[PeerConfig, ...] = ()
    default_peer: PeerConfig = PeerConfig(name="default")
    upstreams: dict[str, UpstreamConfig] = Field(default_factory=dict)
    tokens: tuple[TokenConfig, ...] = ()
    canary_seed: str = "canary"

    @model_validator(mode="after")
    def _references(self) -> PinsConfig:
        problems = reference_problems([(p.name, p.upstream, tuple(p.canary)) for p in (*self.peers, self.default_peer)],
                                      self.upstreams)
        if self.default_peer.by_claims:  # it serves whatever no peer matched: it has nothing to match on
            problems.append("default_peer: client_ids, subjects and scopes are for [[peers]] only")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def peer_values(self) -> tuple[tuple[Peer, ...], Peer]:
        return tuple(p.to_peer() for p in self.peers), self.default_peer.to_peer()

    def token_table(self, env: Mapping[str, str]) -> dict[str, str]:
        """sha256(token) -> principal; env-referenced tokens are hashed here and never kept in clear."""
        table: dict[str, str] = {}
        for entry in self.tokens:
            if entry.token_sha256:
                table[entry.token_sha256.lower()] = entry.principal
            elif value := env.get(entry.token_env or ""):
                table[hashlib.sha256(value.encode()).hexdigest()] = entry.principal
        return table


def reference_problems(peers: Sequence[tuple[str, str, Iterable[str]]], upstreams: Iterable[str]) -> list[str]:
    """Every duplicate peer name and every upstream a peer names that is not declared, from (name, upstream,
    canary upstreams) per peer: also run on the file's raw tables, so a peer with another problem is still
    checked (``check-config`` lists every problem in one run)."""
    names = [name for name, _upstream, _canary in peers]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    problems = [f"duplicate peer name(s): {', '.join(duplicates)}"] if duplicates else []
    known = set(upstreams) | {"default"}
    for name, upstream, canary in peers:
        if missing := sorted({upstream, *canary} - known):
            problems.append(f"peer {name!r} names unknown upstream(s): {', '.join(missing)}")
    return problems
