"""The app keys the endpoint's handlers find the gateway's state under."""

from __future__ import annotations

from aiohttp import web

from gateway.auth.validator import TokenValidator
from gateway.http.passthrough import Passthroughs
from gateway.http.reverse import ReverseBridge
from gateway.http.reverse_bridges import ReverseBridges
from gateway.session.runtime import Gateway

GATEWAY = web.AppKey("gateway", Gateway)
CORE_URL = web.AppKey("core_url", str)  # the embedded core, when one runs (reloads may route to it)
PASSTHROUGHS = web.AppKey("passthroughs", Passthroughs)  # the open modern passthroughs (shutdown ends them)
AUTHZ = web.AppKey("authz", TokenValidator)  # [gateway.auth]: the doors' token validator, when on
REVERSE = web.AppKey("reverse", ReverseBridge)  # a 2025-era main upstream served to 2026 clients (§61)
REVERSES = web.AppKey("reverses", ReverseBridges)  # every 2025-era upstream's bridge, named ones too (§61)
