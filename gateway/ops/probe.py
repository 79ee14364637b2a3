"""The start-up probe of the upstreams (``serve``: the default one and every named one): one ``server/discover``
each, and a 2025 ``initialize`` when that answer is not conclusive, sent once with aiohttp's client;
``adapters.probe`` judges the answers.

It runs once, before the gateway listens, so its own short timeout bounds how long start-up can wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from adapters.authz import read_protection, resource_metadata_location
from adapters.jsonwire import dumps
from adapters.probe import ProbeAnswer, Verdict, judge, judge_http, needs_initialize, protected
from adapters.upstream import SessionView, build_discover
from gateway.auth.fetch import AuthServerError, get_json
from gateway.config.settings import GatewayConfig

log = logging.getLogger("gateway")
_MAX_BODY = 64 << 10  # enough for any discover or initialize answer; a probe never reads a whole page
_PROBE_ID = "gateway-startup-probe"

# A 2025-11-25 initialize (S25 basic/lifecycle §Initialization): the second question, asked only when the
# discover answer leaves the era open.
_INITIALIZE = {
    "jsonrpc": "2.0", "id": _PROBE_ID, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "mcp-legacy-gateway-probe", "version": "0"}},
}
_INITIALIZE_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass(frozen=True, slots=True)
class Target:
    """An upstream ``serve`` probes: the default one (``--upstream``) or a named one (``[upstreams.NAME]``), with
    the gateway's own credential when that upstream is configured to get it (``auth = "gateway"``)."""

    name: str | None  # None: the default upstream
    url: str
    authorization: str | None = None

    def line(self, verdict: Verdict) -> str:
        """The one line ``serve`` logs for it (and ``--require-upstream`` exits with)."""
        if self.name is None:
            return startup_line(self.url, verdict)
        return f"upstream {self.name!r} ({self.url}): {verdict.message}"


def targets(config: GatewayConfig, env: Mapping[str, str]) -> list[Target]:
    """Every upstream a request may go to, except the embedded core (it runs in this process)."""
    found = [Target(None, config.upstream_url)] if config.upstream_url else []
    for name, upstream in config.pins.upstreams.items():
        if upstream.url == "embedded":
            continue
        credential = env.get(upstream.token_env or "") if upstream.auth in ("gateway", "static") else None
        found.append(Target(name, upstream.url, f"Bearer {credential}" if credential else None))
    return found


async def probe_all(found: list[Target], seconds: float) -> list[tuple[Target, Verdict]]:
    """Each target's verdict, probed at once (start-up waits for the slowest, not for their sum)."""
    verdicts = await asyncio.gather(*(probe(t.url, seconds, t.authorization) for t in found))
    return list(zip(found, verdicts, strict=True))


async def probe(url: str, seconds: float = 5.0, authorization: str | None = None) -> Verdict:
    """What is at ``url``; never raises for the upstream's sake (every failure is a verdict)."""
    call = build_discover(_PROBE_ID, SessionView(capabilities={}))
    headers = {**call.headers, "Authorization": authorization} if authorization else call.headers
    limit = aiohttp.ClientTimeout(total=seconds)
    async with aiohttp.ClientSession(timeout=limit) as http:
        discover = await _post(http, url, call.body, headers)
        if discover.status == 401 and authorization is None:
            described = await _protection(http, url, discover, seconds)
            if described is not None:
                return described
        if not needs_initialize(judge_http(discover)):
            return judge(discover)
        second = {**_INITIALIZE_HEADERS, "Authorization": authorization} if authorization else _INITIALIZE_HEADERS
        return judge(discover, await _post(http, url, _INITIALIZE, second))


async def _protection(http: aiohttp.ClientSession, url: str, answer: ProbeAnswer, seconds: float) -> Verdict | None:
    """A 401's protected-resource metadata (RFC 9728), read where its challenge says; None when there is none."""
    location = resource_metadata_location(answer.challenges, url)
    try:
        doc = await get_json(http, location, seconds=seconds)
    except AuthServerError as exc:
        log.info("upstream %s: 401 without readable protected-resource metadata (%s)", url, exc)
        return None
    found = read_protection(doc)
    if isinstance(found, str):
        log.info("upstream %s: %s", url, found)
        return None
    return protected(found)


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str]) -> ProbeAnswer:
    try:
        async with http.post(url, data=dumps(body), headers=headers, allow_redirects=False) as resp:
            return ProbeAnswer(resp.status, resp.content_type, await _head_of_body(resp),
                               challenges=tuple(resp.headers.getall("WWW-Authenticate", ())))
    except TimeoutError:
        return ProbeAnswer(failure="no answer in time")
    except aiohttp.ClientConnectorError as exc:
        return ProbeAnswer(failure=f"connection failed: {exc.os_error.strerror or exc}")
    except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a URL aiohttp cannot use
        return ProbeAnswer(failure=f"{type(exc).__name__}: {exc}")


async def _head_of_body(resp: aiohttp.ClientResponse) -> bytes:
    """The body up to :data:`_MAX_BODY`; for an SSE stream, up to its first complete event (it may stay open)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        parts.append(chunk)
        size += len(chunk)
        if size >= _MAX_BODY or (resp.content_type == "text/event-stream" and b"\n\n" in b"".join(parts)):
            break
    return b"".join(parts)


def startup_line(url: str, verdict: Verdict) -> str:
    """The one line ``serve`` logs (and ``--require-upstream`` exits with)."""
    return f"upstream {url}: {verdict.message}"
