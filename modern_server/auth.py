"""Bearer token -> principal. The core keeps only SHA-256 digests of tokens (config.token_table)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


class Unauthorized(Exception):
    """A bad or unknown credential: HTTP 401, before any JSON-RPC processing."""


def principal_for(authorization: str | None, table: Mapping[str, str], anonymous: str | None) -> str:
    if authorization is None:
        if anonymous is None:
            raise Unauthorized("this server requires a bearer token")
        return anonymous
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("expected 'Authorization: Bearer <token>'")
    principal = table.get(hashlib.sha256(token.strip().encode()).hexdigest())
    if principal is None:
        raise Unauthorized("unknown bearer token")
    return principal
