"""Per-peer pins: which peer a request belongs to, what it may speak, where it goes.

Pure policy over plain values; the shell builds :class:`Peer` values from the configuration and injects
``today`` and the canary seed. Decisions:

- **Matching.** First the credential (a security control): the first peer listing the principal (a static
  ``[[tokens]]`` name), or whose token-claim conditions the verified token meets (``client_ids`` and
  ``subjects`` globs, ``scopes`` all held; every kind listed must match), wins. Then, only for principals no
  such peer takes, the self-reported ``clientInfo`` name/version glob patterns of peers with no credential
  condition — a convenience for routing and reporting, *not* a security control, since any client can claim
  any name (2026 basic/index: clientInfo is display data). Otherwise the default peer. A session keeps the
  peer it was opened with (its record's pins); a peer matched on ``scopes`` is also checked on each request,
  so a token refreshed without them steps up again rather than keeping the peer.
- **Revisions.** A peer lists the revisions it may speak. A legacy-only peer that probes with a modern request
  (auto-mode clients send ``server/discover`` first) gets UNSUPPORTED_PROTOCOL_VERSION whose ``supported``
  lists only legacy revisions: dual-era clients (the official SDK's ``mode="auto"``, streamable-http §Backward
  compatibility) read that as "fall back to ``initialize``". A modern-only peer's ``initialize`` gets the 2025
  shape of a version error (INVALID_PARAMS with ``{supported, requested}``, 2025-11-25 basic/lifecycle) naming
  the revision it must use.
- **Sunset.** After a peer's sunset date its legacy revisions are refused with an error naming the date and
  the revision to move to; before it, results may carry the operator's deprecation notice.
- **Canary.** A weighted split of a peer's *new sessions* across upstreams, decided by a keyed hash of the
  session id, so it is stable for a session and reproducible for a seed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

from adapters.authz import Principal
from adapters.bridge import BridgeLimits
from adapters.errors import INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION, ErrorValue
from adapters.jsonwire import JsonObject, JsonValue, JsonView, members
from adapters.protocol import HANDSHAKE_VERSIONS, LEGACY_VERSIONS, MODERN_VERSION
from adapters.tool_policy import OPEN, ToolPolicy, policy_from_record, policy_record

INPUT_KINDS = ("sampling", "elicitation.form", "elicitation.url", "roots")
DEPRECATION_META_KEY = "dev.legacy-gateway/deprecation"


@dataclass(frozen=True, slots=True)
class Peer:
    name: str
    revisions: tuple[str, ...] = (*HANDSHAKE_VERSIONS, MODERN_VERSION)
    principals: tuple[str, ...] = ()
    client_name: str | None = None  # glob, matched against clientInfo.name
    client_version: str | None = None  # glob, matched against clientInfo.version
    sunset: str | None = None  # ISO date (YYYY-MM-DD); ISO dates order as strings, so no clock type is needed
    deprecation_notice: str | None = None
    upstream: str = "default"
    canary: tuple[tuple[str, int], ...] = ()  # (upstream, percent of new sessions)
    input_kinds: tuple[str, ...] = INPUT_KINDS
    max_rounds: int | None = None
    answer_timeout_seconds: float | None = None
    extra: Mapping[str, object] = field(default_factory=dict)
    trace: bool | None = None  # translation traces and spans for this peer (None: the gateway's [gateway.trace])
    trace_content: bool | None = None  # with content (None: the gateway's)
    # Token-claim conditions (a verified token's, adapters.authz.Principal): globs, globs, scopes all held.
    client_ids: tuple[str, ...] = ()
    subjects: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    tools: ToolPolicy = OPEN  # adapters.tool_policy

    @property
    def by_claims(self) -> bool:
        return bool(self.client_ids or self.subjects or self.scopes)

    @property
    def legacy(self) -> tuple[str, ...]:
        return tuple(r for r in self.revisions if r in HANDSHAKE_VERSIONS)

    @property
    def modern(self) -> bool:
        return MODERN_VERSION in self.revisions


def _claims(peer: Peer, client_info: object) -> bool:
    if peer.client_name is None and peer.client_version is None:
        return False
    info = client_info if isinstance(client_info, Mapping) else {}
    name, version = str(info.get("name", "")), str(info.get("version", ""))
    return ((peer.client_name is None or fnmatchcase(name, peer.client_name))
            and (peer.client_version is None or fnmatchcase(version, peer.client_version)))


def _token_claims(peer: Peer, grant: Principal | None) -> bool:
    """Whether a verified token meets every claim condition the peer lists (it lists at least one)."""
    if grant is None or not peer.by_claims:
        return False
    client = grant.client_id
    return ((not peer.client_ids or (client is not None and any(fnmatchcase(client, g) for g in peer.client_ids)))
            and (not peer.subjects or any(fnmatchcase(grant.subject, g) for g in peer.subjects))
            and grant.scopes.issuperset(peer.scopes))


def match_peer(peers: Sequence[Peer], default: Peer, principal: str,
               client_info: object, grant: Principal | None = None) -> Peer:
    """The peer of a request's credential, else of its clientInfo, else the default (module docstring).
    ``grant``: the verified token's claims ([gateway.auth]), never the token."""
    for peer in peers:
        if principal in peer.principals or _token_claims(peer, grant):
            return peer
    for peer in peers:
        if not peer.principals and not peer.by_claims and _claims(peer, client_info):
            return peer
    return default


def scopes_kept(peer: Peer, grant: Principal | None) -> bool:
    """Whether a session's request still holds the scopes its peer was matched on (module docstring)."""
    return not peer.scopes or (grant is not None and grant.scopes.issuperset(peer.scopes))


def sunset_passed(peer: Peer, today: str) -> bool:
    return peer.sunset is not None and today > peer.sunset


def sunset_error(peer: Peer, revision: str) -> ErrorValue:
    assert peer.sunset is not None
    message = (f"legacy MCP access for this client ended on {peer.sunset}: revision {revision} is "
               f"no longer served; move to MCP {MODERN_VERSION}")
    data: JsonObject = {"supported": [MODERN_VERSION], "requested": revision, "sunset": peer.sunset}
    return ErrorValue(INVALID_PARAMS, message, data, log=f"sunset refusal for peer {peer.name}")


def admit_initialize(peer: Peer, negotiated: str, today: str) -> ErrorValue | None:
    """Can this peer open a legacy session at ``negotiated``? None means yes."""
    if not peer.legacy:
        message = (f"this client must use MCP {MODERN_VERSION} (no initialize handshake); "
                   "legacy revisions are not served")
        return ErrorValue(INVALID_PARAMS, message, {"supported": [MODERN_VERSION], "requested": negotiated},
                          log=f"modern-only peer {peer.name} sent initialize")
    if sunset_passed(peer, today):
        return sunset_error(peer, negotiated)
    return None


def legacy_answer_version(peer: Peer, requested: object, offered: tuple[str, ...] = HANDSHAKE_VERSIONS) -> str:
    """The legacy version to answer within this peer's pins and the revisions its door ``offered``
    (2025-11-25 basic/lifecycle: echo, else our latest)."""
    allowed = tuple(r for r in peer.legacy if r in offered)
    if isinstance(requested, str) and requested in allowed:
        return requested
    return allowed[0] if allowed else peer.legacy[0] if peer.legacy else LEGACY_VERSIONS[0]


def admit_modern(peer: Peer, requested: str) -> ErrorValue | None:
    """Can this peer send a modern (2026-07-28) request? None means pass it through."""
    if peer.modern:
        return None
    # UNSUPPORTED_PROTOCOL_VERSION listing only handshake revisions steers dual-era clients to initialize (module
    # docstring).
    return ErrorValue(UNSUPPORTED_PROTOCOL_VERSION,
                      f"this client is pinned to MCP {', '.join(peer.legacy)}; use the initialize handshake",
                      {"supported": list(peer.legacy), "requested": requested},
                      log=f"legacy-pinned peer {peer.name} sent a modern request")


def deprecation_meta(peer: Peer, today: str) -> JsonObject | None:
    """The operator's notice for legacy sessions before the sunset, as a result ``_meta`` entry."""
    notice = _notice(peer, today)
    return None if notice is None else {DEPRECATION_META_KEY: notice}


def _notice(peer: Peer, today: str) -> JsonObject | None:
    if peer.deprecation_notice is None or sunset_passed(peer, today):
        return None
    notice: JsonObject = {"message": peer.deprecation_notice, "moveTo": MODERN_VERSION}
    if peer.sunset is not None:
        notice["sunset"] = peer.sunset
    return notice


def pick_upstream(peer: Peer, session_key: str, seed: str) -> str:
    """The upstream for a new session: canary shares by a keyed hash of the session id, else the peer's own."""
    bucket = int.from_bytes(hashlib.sha256(f"{seed}:{session_key}".encode()).digest()[:8], "big") % 100
    edge = 0
    for upstream, percent in peer.canary:
        edge += percent
        if bucket < edge:
            return upstream
    return peer.upstream


def allowed_input_kind(peer: Peer, method: str, params: JsonView) -> str | None:
    """None when the peer's bridge policy allows this input request, else the kind it refuses."""
    kind = {"sampling/createMessage": "sampling", "roots/list": "roots"}.get(method)
    if method == "elicitation/create":
        kind = "elicitation.url" if params.get("mode") == "url" else "elicitation.form"
    return None if kind is None or kind in peer.input_kinds else kind


def peer_record(peer: Peer) -> JsonObject:
    """A JSON-compatible snapshot of a peer's pins, kept in the session record (the tool policy and matched
    scopes only when there are some: every idle session holds its record)."""
    record: JsonObject = {
        "name": peer.name, "revisions": [*peer.revisions], "sunset": peer.sunset,
        "deprecation_notice": peer.deprecation_notice, "upstream": peer.upstream,
        "input_kinds": [*peer.input_kinds], "max_rounds": peer.max_rounds,
        "answer_timeout_seconds": peer.answer_timeout_seconds, "trace": peer.trace,
        "trace_content": peer.trace_content}
    if peer.scopes:
        record["scopes"] = [*peer.scopes]
    if not peer.tools.open:
        record["tools"] = policy_record(peer.tools)
    return record


def peer_from_record(data: JsonView) -> Peer:
    """The peer :func:`peer_record` wrote (a session's pins), each member read as the type it was written."""
    if not data:
        return Peer("default")
    rounds, timeout, upstream = data.get("max_rounds"), data.get("answer_timeout_seconds"), data.get("upstream")
    return Peer(str(data["name"]), _texts(data.get("revisions"), ()), sunset=_text(data.get("sunset")),
                deprecation_notice=_text(data.get("deprecation_notice")),
                upstream=upstream if isinstance(upstream, str) else "default",
                input_kinds=_texts(data.get("input_kinds"), INPUT_KINDS),
                max_rounds=rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else None,
                answer_timeout_seconds=float(timeout) if isinstance(timeout, int | float)
                and not isinstance(timeout, bool) else None,
                trace=_flag(data.get("trace")), trace_content=_flag(data.get("trace_content")),
                scopes=_texts(data.get("scopes"), ()), tools=policy_from_record(data.get("tools")))


def _text(value: JsonValue) -> str | None:
    return value if isinstance(value, str) else None


def _texts(value: JsonValue, default: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else default


def _flag(value: JsonValue) -> bool | None:
    return value if isinstance(value, bool) else None


def client_info_of(initialize: bool, params: JsonView) -> JsonView | None:
    """The clientInfo a session-less request reports: the handshake's own (2025-11-25 basic/lifecycle), or a
    2026-07-28 request's ``_meta`` entry (2026-07-28 basic §_meta)."""
    meta = params.get("_meta")
    info = params.get("clientInfo") if initialize else (
        meta.get("io.modelcontextprotocol/clientInfo") if isinstance(meta, Mapping) else None)
    return info if isinstance(info, Mapping) else None


def trace_policy(peer: Peer | None, enabled: bool, content: bool) -> tuple[bool, bool]:
    """(traced, with content) for a peer's requests: its own ``[peers.trace]`` choices over the gateway's."""
    if peer is None:
        return enabled, content
    return (enabled if peer.trace is None else peer.trace,
            content if peer.trace_content is None else peer.trace_content)


def mask_capabilities(caps: JsonView, peer: Peer) -> JsonObject:
    """The client's capabilities minus the input kinds this peer's bridge policy forbids.

    Masking at the capability level means the upstream is told the truth (it answers
    MISSING_REQUIRED_CLIENT_CAPABILITY or does without) and the bridge never has a request of a forbidden kind to
    send (capabilities are per request: 2026-07-28 basic §_meta)."""
    masked = dict(caps)
    if "sampling" not in peer.input_kinds:
        masked.pop("sampling", None)
    if "roots" not in peer.input_kinds:
        masked.pop("roots", None)
    elicitation = masked.get("elicitation")
    if isinstance(elicitation, Mapping):
        modes = {"form": "form" in elicitation or "url" not in elicitation, "url": "url" in elicitation}
        kept = {m: elicitation.get(m, {}) for m, on in modes.items() if on and f"elicitation.{m}" in peer.input_kinds}
        if kept:
            masked["elicitation"] = kept
        else:
            masked.pop("elicitation")
    return masked


def peer_limits(limits: BridgeLimits, peer: Peer) -> BridgeLimits:
    """The gateway-wide bridge limits, narrowed by the peer's own (the peer's bridge policy)."""
    if peer.max_rounds is not None:
        limits = replace(limits, max_rounds=min(limits.max_rounds, peer.max_rounds))
    if peer.answer_timeout_seconds is not None:
        limits = replace(limits, client_answer_timeout_seconds=peer.answer_timeout_seconds)
    return limits


def with_notice(result: JsonObject, peer: Peer, today: str) -> JsonObject:
    """An InitializeResult carrying the peer's deprecation notice: in ``_meta`` for programs, and appended to
    ``instructions`` so the people reading them see it too."""
    notice = _notice(peer, today)
    if notice is None:
        return result
    out = dict(result)
    out["_meta"] = {**members(result.get("_meta")), DEPRECATION_META_KEY: notice}
    when = f" Legacy access ends after {notice['sunset']}." if "sunset" in notice else ""
    line = f"Deprecation notice: {notice['message']}{when} Move to MCP {MODERN_VERSION}."
    out["instructions"] = f"{result['instructions']}\n\n{line}" if result.get("instructions") else line
    return out
