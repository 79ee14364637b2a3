"""The embedded core's out-of-band pages on the gateway's own address.

``connect_service`` sends the user to a page (2025-11-25 client/elicitation §URL mode). With the embedded core
that page belongs to a server on a random loopback port, which changes at every restart and cannot be reached
when the gateway is exposed beyond loopback; so the core names its pages from the gateway's public URL and the
gateway relays ``/connect/...`` to the core. The relay is plain: method, path, body, the credential and the
content type go through, the answer comes back as it is.
"""

from __future__ import annotations

import aiohttp
from aiohttp import web

from gateway.http.keys import CORE_URL

_FORWARDED = ("authorization", "content-type", "cookie")


async def relay_page(request: web.Request) -> web.StreamResponse:
    core = request.app.get(CORE_URL)
    if core is None:
        raise web.HTTPNotFound(text="no embedded core runs here")
    target = core.removesuffix("/mcp") + request.rel_url.path_qs
    headers = {k: v for k, v in request.headers.items() if k.lower() in _FORWARDED}
    async with aiohttp.ClientSession() as http, http.request(request.method, target, headers=headers,
                                                             data=await request.read()) as answer:
        body = await answer.read()
        return web.Response(status=answer.status, body=body, content_type=answer.content_type)


def add_page_routes(app: web.Application) -> None:
    app.router.add_route("GET", "/connect/{conn_id}", relay_page)
    app.router.add_route("POST", "/connect/{conn_id}/complete", relay_page)
