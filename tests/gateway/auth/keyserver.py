"""A small authorization server's key side on loopback, for token checks the real one cannot be made to do
(expired, not yet valid, foreign, tampered or confused tokens): RFC 8414 metadata and a JWKS, with keys the
test signs with (PyJWT, RSA and EC keys from ``cryptography``)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa

RESOURCE = "http://127.0.0.1:8808/mcp"


@dataclass
class KeyServer:
    """Serves ``/.well-known/oauth-authorization-server`` and ``/jwks``; ``keys`` is what the JWKS publishes now."""

    issuer: str = ""
    keys: dict[str, Any] = field(default_factory=dict)  # kid -> private key
    jwks_hits: int = 0
    down: bool = False
    delay: float = 0.0  # seconds before each answer: a slow server
    claimed_issuer: str | None = None  # what the metadata says the issuer is (None: the truth)
    jwks_body: bytes | None = None  # a JWKS answer of this body instead of the keys (a lying server)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/oauth-authorization-server", self.metadata)
        app.router.add_get("/jwks", self.jwks)
        return app

    async def metadata(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay)  # sleep: a slow server, when the test asks for one
        return web.json_response({"issuer": self.claimed_issuer or self.issuer, "jwks_uri": f"{self.issuer}/jwks",
                                  "token_endpoint": f"{self.issuer}/token"})

    async def jwks(self, request: web.Request) -> web.Response:
        self.jwks_hits += 1
        await asyncio.sleep(self.delay)  # sleep: a slow server, when the test asks for one
        if self.down:
            return web.Response(status=503)
        if self.jwks_body is not None:
            return web.Response(body=self.jwks_body, content_type="application/json")
        keys = []
        for kid, key in self.keys.items():
            public = json.loads(jwt.algorithms.get_default_algorithms()[_alg(key)].to_jwk(key.public_key()))
            keys.append({**public, "kid": kid, "use": "sig"})
        return web.json_response({"keys": keys})

    def add_key(self, kid: str, kind: str = "rsa") -> Any:
        key = rsa.generate_private_key(65537, 2048) if kind == "rsa" else ec.generate_private_key(ec.SECP256R1())
        self.keys[kid] = key
        return key

    def token(self, kid: str = "k1", *, key: Any = None, alg: str | None = None, typ: str = "at+jwt",
              headers: dict[str, Any] | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.issuer, "sub": "alice", "aud": RESOURCE, "client_id": "app", "scope": "mcp:tools",
                "iat": now, "exp": now + 300, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        signing = key if key is not None else self.keys[kid]
        return jwt.encode(body, signing, algorithm=alg or _alg(signing),
                          headers={"kid": kid, "typ": typ, **(headers or {})})


def _alg(key: Any) -> str:
    return "ES256" if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) else "RS256"
