"""The embedded core's out-of-band pages on the gateway's own address.

``connect_service`` sends the user to a page (2025-11-25 client/elicitation §URL mode). With the embedded core
that page belongs to a server on a random loopback port, which changes at every restart and cannot be reached
when the gateway is exposed beyond loopback; so the core names its pages from the gateway's public URL and the
gateway relays ``/connect/...`` to the core. The relay is plain: method, body, the credential and the content type
go through, the answer comes back as it is. It is confined to the two page paths: the connection id must be one
plain path segment of the core's id alphabet, the raw path must be exactly the page's (so no encoded ``/`` or
``..`` can steer it to another core path, ``/mcp`` above all), and the path is rebuilt from those parts, never
copied. Host and Origin are checked as for ``/mcp`` (2025-11-25 basic/transports §Security Warning: DNS
rebinding), the gateway's own public origin allowed too: the page's form posts to it.
"""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from adapters.classify import Policy, check_origin_host
from gateway.http.answers import rejection_response
from gateway.http.keys import CORE_URL, GATEWAY

_FORWARDED = ("authorization", "content-type", "cookie")
PREFIX = "/connect/"
# The core's connection ids (secrets.token_urlsafe): one segment, nothing to decode. Longer ids are not its.
_CONN_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def page_path(raw_path: str, conn_id: str, complete: bool) -> str | None:
    """The core path a request for ``raw_path`` (as sent, still percent-encoded) is relayed to, or None (404):
    only ``/connect/<id>`` and ``/connect/<id>/complete`` with a plain id, byte for byte."""
    if _CONN_ID.fullmatch(conn_id) is None:
        return None
    path = PREFIX + conn_id + ("/complete" if complete else "")
    return path if raw_path == path else None


def _policy(request: web.Request) -> Policy:
    gw = request.app[GATEWAY]
    base = gw.config.public_base()
    if base is None:
        return gw.policy
    parts = urlsplit(base)
    return dataclasses.replace(gw.policy, allowed_origins=(*gw.policy.allowed_origins,
                                                           f"{parts.scheme}://{parts.netloc}"))


async def relay_page(request: web.Request) -> web.StreamResponse:
    core = request.app.get(CORE_URL)
    if core is None:
        raise web.HTTPNotFound(text="no embedded core runs here")
    refused = check_origin_host(request.headers, _policy(request))
    if refused is not None:
        return rejection_response(refused)
    path = page_path(request.rel_url.raw_path, request.match_info["conn_id"], request.method == "POST")
    if path is None:
        raise web.HTTPNotFound(text="no such page")
    target = core.removesuffix("/mcp") + path
    headers = {k: v for k, v in request.headers.items() if k.lower() in _FORWARDED}
    async with aiohttp.ClientSession() as http, http.request(request.method, target, headers=headers,
                                                             data=await request.read()) as answer:
        body = await answer.read()
        return web.Response(status=answer.status, body=body, content_type=answer.content_type)


def add_page_routes(app: web.Application) -> None:
    app.router.add_route("GET", "/connect/{conn_id}", relay_page)
    app.router.add_route("POST", "/connect/{conn_id}/complete", relay_page)
