"""DNS-rebinding defence (streamable-http §Security): a POST whose Origin the core does not trust is 403.

Found by the official conformance suite (``dns-rebinding-protection``): Host and Origin ``evil.example.com``
must be rejected with a 4xx, loopback Origins must be served. Requests without an Origin are not browsers and
are unaffected (every other test in this folder sends none).
"""

from __future__ import annotations

import pytest

from modern_server.app import origin_allowed
from modern_server.config import CoreConfig


@pytest.mark.parametrize("origin", ["http://evil.example.com", "https://evil.example.com:8809", "null",
                                    "file://", "http://127.0.0.1.evil.example", "not a url"])
async def test_untrusted_origin_is_403_before_anything_else(client, origin):
    reply = await client.call("server/discover", headers={"Origin": origin, "Host": "evil.example.com"})
    assert reply.status == 403
    assert "result" not in reply.raw


@pytest.mark.parametrize("origin", ["http://localhost", "http://localhost:5173", "http://127.0.0.1:8809",
                                    "http://[::1]:8809", "https://LOCALHOST"])
async def test_loopback_origins_are_served(client, origin):
    reply = await client.call("server/discover", headers={"Origin": origin})
    assert reply.status == 200 and reply.result["resultType"] == "complete"


def test_public_url_and_allowed_origins_are_trusted_exactly():
    config = CoreConfig(public_url="https://mcp.example.com/base", allowed_origins=("https://app.example.org:8443",))
    assert origin_allowed(None, config)
    assert origin_allowed("https://mcp.example.com", config)
    assert origin_allowed("https://mcp.example.com:443", config)
    assert origin_allowed("https://app.example.org:8443", config)
    assert not origin_allowed("http://mcp.example.com", config)  # other scheme, other origin
    assert not origin_allowed("https://app.example.org", config)  # other port
    assert not origin_allowed("https://sub.mcp.example.com", config)
    assert not origin_allowed("https://evil.example.com", CoreConfig())
