"""The protected resource a configuration describes: each door's URL is a resource its tokens may name.

Every door (``/mcp``, ``/sse``, ``/ws``) is described at its own RFC 9728 metadata URL with its own URL as
``resource``, since both official SDKs check that the metadata names the URL they connect to. A door other than
``/mcp`` relays each message to ``/mcp`` with the client's token unchanged, so every door's URL is an audience
the endpoint accepts: they are one resource server behind several addresses.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.authz import ResourceServer
from gateway.auth.validator import AuthSettings, Introspection
from gateway.config.settings import AuthConfig, GatewayConfig

DOORS = ("/mcp", "/sse", "/ws")


def door_servers(config: GatewayConfig) -> dict[str, ResourceServer]:
    """Each door's path -> what the gateway says of itself there."""
    auth, base = config.auth, config.public_base()
    assert base is not None, "GatewayConfig refuses [gateway.auth] without a public URL"
    return {door: ResourceServer(base + door, auth.authorization_servers, auth.scopes_supported,
                                 auth.required_scopes, auth.resource_name) for door in DOORS}


def auth_settings(config: GatewayConfig, environ: Mapping[str, str]) -> AuthSettings:
    auth = config.auth
    servers = door_servers(config)
    return AuthSettings(servers["/mcp"], tuple(s.resource for s in servers.values()), auth.leeway_seconds,
                        min_key_refresh_seconds=auth.min_key_refresh_seconds, jwks_uri=auth.jwks_uri,
                        introspection=_introspection(auth, environ))


def _introspection(auth: AuthConfig, environ: Mapping[str, str]) -> Introspection | None:
    if not (auth.introspection_endpoint and auth.introspection_client_id and auth.introspection_secret_env):
        return None
    secret = environ.get(auth.introspection_secret_env)
    if not secret:
        raise ValueError(f"[gateway.auth] introspection_secret_env: ${auth.introspection_secret_env} is not set")
    return Introspection(auth.introspection_endpoint, auth.introspection_client_id, secret,
                         auth.introspection_cache_seconds)
