"""What is at the upstream URL: the pure judgement of a start-up probe's answers (``server/discover``, then a
2025 ``initialize`` when the first answer is not conclusive), and of any HTTP 4xx answer without a JSON-RPC body.

The shell (``gateway.ops.probe``) sends the requests and hands the answers here as :class:`ProbeAnswer` records;
the same judgement explains a misdirected upstream to clients (``http_failure``), so an operator's log line and a
client's error say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from adapters.authz import UpstreamProtection
from adapters.errors import METHOD_NOT_FOUND, ErrorValue, UpstreamFault, upstream_failure
from adapters.handshake import check_discover, server_info_of
from adapters.jsonwire import JsonObject, JsonView, loads, members
from adapters.protocol import MODERN_VERSION
from adapters.sse import EventTooLarge, SseDecoder

__all__ = ["ProbeAnswer", "UpstreamKind", "Verdict", "http_failure", "judge", "judge_http", "needs_initialize",
           "protected"]

# What 2025-era streamable-HTTP servers say when a request comes without a session (S25 basic/transports
# §Session Management: "Servers that require a session ID SHOULD respond ... with HTTP 400 Bad Request");
# the official TypeScript and Python SDKs' wordings.
_SESSION_HINTS = ("missing session id", "no valid session id", "mcp-session-id", "not initialized",
                  "server not initialized", "initialize")
_MAX_SNIPPET = 80
# What serving a 2025-era upstream means (upstream_era "auto", adapters.reverse_wire.era_of): 2026-07-28 clients
# are served in reverse, 2025 clients relayed as they are.
LEGACY_NOTE: Final = "2026-07-28 clients are served in reverse, 2025 clients relayed as they are"


class UpstreamKind(Enum):
    MODERN = "modern"  # a 2026-07-28 server: what the gateway needs
    LEGACY = "legacy"  # a 2025-era MCP server: clients can use it directly, without the gateway
    NOT_MCP = "not_mcp"  # something answered, but not MCP at that path (404, HTML, non-JSON)
    UNREACHABLE = "unreachable"  # connection refused, timeout, DNS
    UNCLEAR = "unclear"  # an MCP-looking answer the gateway cannot place (an auth challenge, another error)
    PROTECTED = "protected"  # a 401 whose protected-resource metadata names an authorization server (OAuth)


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    """One HTTP answer as the shell read it; ``failure`` (and no status) when none came (refused, timeout)."""

    status: int = 0
    content_type: str = ""
    body: bytes = b""
    failure: str | None = None
    challenges: tuple[str, ...] = ()  # its WWW-Authenticate values, in order


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: UpstreamKind
    message: str  # one line for the operator's log and the client's error
    protection: UpstreamProtection | None = None  # PROTECTED: what its metadata says


def protected(protection: UpstreamProtection) -> Verdict:
    """An upstream that answered 401 and described itself (RFC 9728): which resource and authorization servers,
    and that the gateway needs a credential of its own for it (it never passes a client's token on)."""
    servers = ", ".join(protection.authorization_servers)
    return Verdict(UpstreamKind.PROTECTED, f"an OAuth-protected server (resource {protection.resource}, "
                                           f"authorization server {servers}): give the gateway a credential for it "
                                           "(docs/howto/authorization.md)", protection)


def judge_http(answer: ProbeAnswer) -> Verdict:
    """The verdict from one answer to a 2026 request alone (no ``initialize`` probe)."""
    if answer.failure is not None:
        return Verdict(UpstreamKind.UNREACHABLE, f"not reachable ({answer.failure})")
    message = _message(answer)
    if message is None:
        return _not_json(answer)
    result = message.get("result")
    if isinstance(result, Mapping) and check_discover(result) is None:
        info = server_info_of(result)
        return Verdict(UpstreamKind.MODERN, f"a {MODERN_VERSION} server: {info['name']} {info['version']}")
    error = message.get("error")
    if isinstance(error, Mapping):
        return _judge_error(answer.status, error)
    return Verdict(UpstreamKind.UNCLEAR, f"HTTP {answer.status}: a JSON-RPC answer that is not a "
                                         f"{MODERN_VERSION} server/discover result")


def needs_initialize(verdict: Verdict) -> bool:
    """Whether a 2025 ``initialize`` probe could tell more: the upstream answered, but not as a 2026 server."""
    return verdict.kind in (UpstreamKind.UNCLEAR, UpstreamKind.LEGACY)


def judge(discover: ProbeAnswer, initialize: ProbeAnswer | None = None) -> Verdict:
    """The verdict from the ``server/discover`` answer and, when asked for, the 2025 ``initialize`` answer: a
    server that completes the 2025 handshake is 2025-era, whatever its discover answer looked like."""
    first = judge_http(discover)
    if initialize is None or not needs_initialize(first):
        return first
    message = _message(initialize)
    result = message.get("result") if message is not None else None
    if isinstance(result, Mapping) and isinstance(result.get("protocolVersion"), str):
        info = result.get("serverInfo")
        if not isinstance(info, Mapping):
            info = {}
        name = f"{info.get('name', '?')} {info.get('version', '')}".rstrip()
        return Verdict(UpstreamKind.LEGACY, f"a 2025-era MCP server ({name}, protocol {result['protocolVersion']})"
                                            f": {LEGACY_NOTE}")
    return first


def http_failure(answer: ProbeAnswer) -> ErrorValue:
    """An upstream HTTP 4xx answer without a JSON-RPC body as the error for the request: the probe's verdict in
    the message and ``data`` (``upstreamKind``), so clients learn what the operator's log says."""
    verdict = judge_http(answer)
    error = upstream_failure(UpstreamFault.HTTP_STATUS,
                             f"HTTP {answer.status} without a JSON-RPC body: {verdict.message}")
    data = {**members(error.data), "upstreamStatus": answer.status, "upstreamKind": verdict.kind.value}
    return ErrorValue(error.code, error.message, data, error.log)


def _judge_error(status: int, error: JsonView) -> Verdict:
    text = str(error.get("message", ""))
    if error.get("code") == METHOD_NOT_FOUND or _asks_for_session(text):
        return Verdict(UpstreamKind.LEGACY, f"a 2025-era MCP server (HTTP {status}, {text[:_MAX_SNIPPET]!r}): "
                                            f"{LEGACY_NOTE}")
    return Verdict(UpstreamKind.UNCLEAR, f"HTTP {status}: JSON-RPC error {error.get('code')} "
                                         f"{text[:_MAX_SNIPPET]!r} to a {MODERN_VERSION} server/discover")


def _not_json(answer: ProbeAnswer) -> Verdict:
    text = answer.body.decode("utf-8", "replace").strip()
    if answer.status == 400 and _asks_for_session(text):
        return Verdict(UpstreamKind.LEGACY, f"a 2025-era MCP server (HTTP 400, {text[:_MAX_SNIPPET]!r}): "
                                            f"{LEGACY_NOTE}")
    if answer.status in (401, 403):
        return Verdict(UpstreamKind.UNCLEAR, f"HTTP {answer.status}: it asks for credentials the probe does not "
                                             "have (the gateway forwards each client's)")
    what = "an HTML page" if "html" in answer.content_type.lower() else "no JSON-RPC answer"
    return Verdict(UpstreamKind.NOT_MCP, f"not MCP at that path (HTTP {answer.status}, {what}); check the URL "
                                         "(it usually ends in /mcp)")


def _asks_for_session(text: str) -> bool:
    lowered = text.lower()
    return any(hint in lowered for hint in _SESSION_HINTS)


def _message(answer: ProbeAnswer) -> JsonObject | None:
    """The first JSON-RPC message of a JSON or SSE body, or None."""
    if answer.failure is not None:
        return None
    if answer.content_type.lower().startswith("text/event-stream"):
        try:
            events = [data for data in SseDecoder(len(answer.body) + 1).feed(answer.body) if data]
        except EventTooLarge:
            return None
        return next((m for m in map(_parse, events) if m is not None), None)
    return _parse(answer.body)


def _parse(raw: bytes | str) -> JsonObject | None:
    try:
        message = loads(raw)
    except ValueError:
        return None
    return message if isinstance(message, dict) and message.get("jsonrpc") == "2.0" else None
