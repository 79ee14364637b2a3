"""The gateway's own credential for one upstream, obtained at the authorization server and kept in memory only.

``client_credentials`` (RFC 6749 §4.4): one token for the gateway's own client, for the upstream's resource (RFC
8707), fetched again ``refresh_before_seconds`` before it expires. ``token_exchange`` (RFC 8693): the client's
verified token exchanged for one issued for the upstream, cached per subject token (by digest) until shortly before
it expires, at most :data:`MAX_EXCHANGED` of them. Concurrent requests needing the same token share one fetch.
``static``: a fixed token from the environment. The rules (forms, lifetimes, keys, refusals) are
``adapters.credentials``'; a token never reaches a log line, the store, a trace or a span.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from adapters.authz import ResourceServer, authorization_server_metadata_urls, bearer_token, metadata_url
from adapters.credentials import (
    Grant,
    Issued,
    assertion_fields,
    client_assertion_claims,
    client_credentials_form,
    exchange_form,
    exchange_key,
    read_token_answer,
    usable_until,
)
from gateway.auth.fetch import AuthServerError, LazySession, get_json
from gateway.auth.resource import door_servers
from gateway.config.pins import UpstreamAuthConfig
from gateway.config.settings import GatewayConfig
from gateway.errors import AuthError

MAX_EXCHANGED = 10_000  # exchanged tokens cached at once (one per subject token); the oldest goes first


class CredentialError(AuthError):
    """No credential could be had for the upstream; the message says why (never quoting a token)."""


@dataclass(frozen=True, slots=True)
class CredentialSettings:
    grant: Grant
    upstream_url: str
    issuer: str | None = None
    token_endpoint: str | None = None  # default: from the issuer's RFC 8414 / OpenID metadata
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    resource: str | None = None  # default: the upstream's RFC 9728 metadata's resource, else its URL
    scopes: tuple[str, ...] = ()
    refresh_before_seconds: float = 60.0
    static_token: str | None = field(default=None, repr=False)
    own: ResourceServer | None = None  # the gateway's own description, for a step-up challenge to its client
    timeout_seconds: float = 5.0
    assertion_key: Any = field(default=None, repr=False)  # private_key_jwt: the key the client signs with
    assertion_kid: str | None = None


class UpstreamCredentials:
    """``await header(client_authorization)`` -> the ``Authorization`` value for the upstream, or None."""

    def __init__(self, settings: CredentialSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings, self._clock = settings, clock
        self.grant = settings.grant
        self._http = LazySession()
        self._tokens: OrderedDict[str, tuple[Issued, float]] = OrderedDict()  # key -> (token, used until)
        self._fetching: dict[str, asyncio.Future[Issued]] = {}
        self._endpoint: str | None = settings.token_endpoint
        self._resource: str | None = settings.resource
        self.fetched = 0  # tokens obtained from the authorization server (operators and tests read it)

    async def close(self) -> None:
        await self._http.close()

    async def header(self, client_authorization: str | None) -> str | None:
        grant = self.grant
        if grant is Grant.FORWARD:
            return client_authorization
        if grant is Grant.STATIC:
            return f"Bearer {self.settings.static_token}" if self.settings.static_token else None
        if grant is Grant.NONE:
            return None
        key = self._key(client_authorization)
        return f"Bearer {(await self._token(key, client_authorization)).token}"

    def forget(self, client_authorization: str | None) -> None:
        """After the upstream refused the token: the next :meth:`header` fetches a fresh one."""
        if self.grant.minted:
            self._tokens.pop(self._key(client_authorization), None)

    def _key(self, client_authorization: str | None) -> str:
        if self.grant is Grant.CLIENT_CREDENTIALS:
            return ""
        subject = bearer_token(client_authorization)
        if not isinstance(subject, str):
            raise CredentialError("token_exchange needs the client's access token, and the request has none")
        return exchange_key(subject)

    async def _token(self, key: str, client_authorization: str | None) -> Issued:
        cached = self._tokens.get(key)
        if cached is not None and self._clock() < cached[1]:
            self._tokens.move_to_end(key)
            return cached[0]
        pending = self._fetching.get(key)
        if pending is None:
            pending = self._fetching[key] = asyncio.ensure_future(self._fetch(key, client_authorization))
            pending.add_done_callback(lambda _f: self._fetching.pop(key, None))
        return await asyncio.shield(pending)

    async def _fetch(self, key: str, client_authorization: str | None) -> Issued:
        settings = self.settings
        resource = await self._upstream_resource()
        if self.grant is Grant.CLIENT_CREDENTIALS:
            form = client_credentials_form(resource, settings.scopes)
        else:
            subject = bearer_token(client_authorization)
            assert isinstance(subject, str), "checked by _key"
            form = exchange_form(subject, resource, settings.scopes)
        endpoint = await self._token_endpoint()
        basic: tuple[str, str] | None = (settings.client_id or "", settings.client_secret or "")
        if settings.assertion_key is not None:
            form |= assertion_fields(settings.client_id or "", self._assertion(endpoint))
            basic = None
        try:
            answer = await get_json(self._http(), endpoint, data=form, basic=basic, seconds=settings.timeout_seconds)
        except AuthServerError as exc:
            raise CredentialError(f"{self.grant.value} at {endpoint} failed: {exc}") from None
        issued = read_token_answer(answer, self._clock())
        if isinstance(issued, str):
            raise CredentialError(f"{self.grant.value} at {endpoint}: {issued}")
        self.fetched += 1
        self._tokens[key] = (issued, usable_until(issued, settings.refresh_before_seconds))
        self._tokens.move_to_end(key)
        while len(self._tokens) > MAX_EXCHANGED:
            self._tokens.popitem(last=False)
        return issued

    def _assertion(self, endpoint: str) -> str:
        """A fresh private_key_jwt assertion for one token request, signed with PyJWT."""
        settings = self.settings
        claims = client_assertion_claims(settings.client_id or "", endpoint, self._clock(), secrets.token_urlsafe(18))
        alg = "ES256" if isinstance(settings.assertion_key, ec.EllipticCurvePrivateKey) else "RS256"
        headers = {"kid": settings.assertion_kid} if settings.assertion_kid else None
        return jwt.encode(claims, settings.assertion_key, algorithm=alg, headers=headers)

    async def _token_endpoint(self) -> str:
        if self._endpoint is None:
            issuer = self.settings.issuer or ""
            for url in authorization_server_metadata_urls(issuer):
                try:
                    found = (await get_json(self._http(), url, seconds=self.settings.timeout_seconds)).get(
                        "token_endpoint")
                except AuthServerError:
                    continue
                if isinstance(found, str) and found.startswith(("https://", "http://")):
                    self._endpoint = found
                    break
            else:
                raise CredentialError(f"the authorization server {issuer} publishes no token_endpoint")
        return self._endpoint

    async def _upstream_resource(self) -> str:
        """The upstream's resource indicator: configured, or its RFC 9728 metadata's ``resource``, else its URL."""
        if self._resource is None:
            url = self.settings.upstream_url
            try:
                found = (await get_json(self._http(), metadata_url(url), seconds=self.settings.timeout_seconds)).get(
                    "resource")
            except AuthServerError:
                found = None
            self._resource = found if isinstance(found, str) and found else url
        return self._resource


def credentials_for(auth: UpstreamAuthConfig, upstream_url: str, config: GatewayConfig,
                    environ: Mapping[str, str]) -> UpstreamCredentials:
    """An upstream's credential from its configuration; a secret named but not set is a ValueError at start."""
    grant = Grant.of(auth.auth or "none")
    secret = static = key = None
    if grant.minted and auth.client_assertion_key_file:
        key = _assertion_key(auth.client_assertion_key_file)
    elif grant.minted:
        secret = environ.get(auth.client_secret_env or "")
        if not secret:
            raise ValueError(f"auth = {auth.auth!r}: ${auth.client_secret_env} (client_secret_env) is not set")
    elif grant is Grant.STATIC:
        static = environ.get(auth.token_env or "") or None
    own = door_servers(config)["/mcp"] if config.auth.enabled else None
    return UpstreamCredentials(CredentialSettings(
        grant, upstream_url, auth.issuer, auth.token_endpoint, auth.client_id, secret, auth.resource,
        auth.scopes, auth.refresh_before_seconds, static, own, assertion_key=key,
        assertion_kid=auth.client_assertion_kid))


def _assertion_key(path: str) -> Any:
    """The PEM private key of client_assertion_key_file (RSA or EC), or a one-line ValueError at start."""
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"client_assertion_key_file {path}: {exc}") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise ValueError(f"client_assertion_key_file {path}: an RSA or EC private key is needed")
    return key
