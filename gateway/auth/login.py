"""The stdio door's user logs in to its upstream: discovery, registration, the flows, the token folder.

When the upstream answers 401 (2025-11-25 basic/authorization, "Authorization Server Discovery"), its
protected-resource metadata (RFC 9728, where the challenge's ``resource_metadata`` says) names the resource and its
authorization server, whose RFC 8414 / OpenID metadata names the endpoints. The user's own client then gets a token
for that resource (RFC 8707): authorization code with PKCE through the browser and a loopback callback (RFC 8252),
device code (RFC 8628), or client credentials; the client is configured (``--client-id``) or registered once per
issuer (RFC 7591). The token is kept per issuer and resource in the token folder (owner-only: folder 0700, files
0600), refreshed ahead of expiry, and after an upstream 401 refreshed once, else the flow runs again.

:class:`UserLogin` is an :class:`~gateway.auth.credentials.UpstreamCredentials`: it plugs into the upstream client's
credential seam, so every upstream request of the stdio process carries the user's token for the upstream's
resource, never anything else. The rules are ``adapters.oauth_client``'; a token never reaches a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import webbrowser
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from adapters.authz import UpstreamProtection, challenge_params, read_protection, resource_metadata_location
from adapters.credentials import Grant, client_credentials_form
from adapters.jsonwire import dumps, loads
from adapters.oauth_client import (
    CALLBACK_PATH,
    MAX_SAID_CHARS,
    SLOW_DOWN_SECONDS,
    ClientRegistration,
    LoginGrant,
    Poll,
    StoredToken,
    authorization_url,
    callback_code,
    callback_page,
    can_open_browser,
    client_file_name,
    code_form,
    device_form,
    device_token_form,
    dump_client,
    dump_token,
    load_client,
    load_token,
    pkce,
    read_device_authorization,
    read_poll_error,
    read_registration,
    read_user_token,
    refresh_due,
    refresh_form,
    registration_request,
    resource_covers,
    scopes_to_ask,
    state_of,
    supports_s256,
    token_file_name,
)
from adapters.upstream import SessionView, build_discover
from gateway.auth.credentials import CredentialError, CredentialSettings, UpstreamCredentials
from gateway.auth.fetch import MAX_BODY_BYTES, AuthServerError, get_json
from gateway.auth.keys import Issuer

APP_FOLDER = "mcp-legacy-gateway"


def default_token_dir(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """``$XDG_CONFIG_HOME/mcp-legacy-gateway/tokens``, else ``~/.config/mcp-legacy-gateway/tokens``."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / APP_FOLDER / "tokens"


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # stdout is the stdio client's: JSON-RPC only


@dataclass(frozen=True, slots=True)
class LoginSettings:
    upstream_url: str
    token_dir: Path
    grant: LoginGrant = LoginGrant.AUTHORIZATION_CODE
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    scopes: tuple[str, ...] = ()
    open_browser: bool = True
    refresh_before_seconds: float = 60.0
    timeout_seconds: float = 10.0  # each request to the upstream or the authorization server
    login_timeout_seconds: float = 300.0  # how long the user has to finish the browser or device flow
    headers: tuple[tuple[str, str], ...] = ()  # the extra upstream headers, sent with discovery's request too
    say: Callable[[str], None] = say
    program: str = "gateway stdio"  # who says the lines: the stdio door, or ``check`` with the same login


@dataclass(frozen=True, slots=True)
class Discovered:
    """The upstream's protection and its authorization server, as discovery found them."""

    protection: UpstreamProtection
    issuer: str
    metadata: dict[str, Any]
    challenge_scope: str | None = None

    def endpoint(self, name: str) -> str:
        value = self.metadata.get(name)
        if not isinstance(value, str) or not value.startswith(("https://", "http://")):
            raise CredentialError(f"the authorization server {self.issuer} publishes no {name}")
        return value


class TokenFolder:
    """Files in a folder only its owner may read: made 0700, each file written 0600 to a temporary name, then
    renamed over the old one (a reader never sees half a file, and no other user ever sees a token)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self, name: str) -> Any:
        try:
            return json.loads((self.path / name).read_text())
        except (OSError, ValueError):
            return None

    def write(self, name: str, doc: dict[str, Any]) -> None:
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)
        temporary = self.path / f".{name}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(doc, indent=1))
        os.replace(temporary, self.path / name)


async def post_json(http: aiohttp.ClientSession, url: str, *, form: dict[str, str] | None = None,
                    body: dict[str, Any] | None = None, basic: tuple[str, str] | None = None,
                    seconds: float = 10.0) -> tuple[int, dict[str, Any]]:
    """A form (or JSON) POST to an authorization server: its status and JSON object (bounded, no redirects); an
    error answer's body is read too (RFC 6749 §5.2), anything unreadable is :class:`AuthServerError`."""
    headers = {"Accept": "application/json"}
    if basic is not None:
        headers["Authorization"] = aiohttp.encode_basic_auth(*basic)
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        async with http.post(url, data=form if body is None else dumps(body), headers=headers,
                             allow_redirects=False, timeout=aiohttp.ClientTimeout(total=seconds)) as resp:
            raw = await resp.content.read(MAX_BODY_BYTES + 1)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise AuthServerError(f"{url}: {type(exc).__name__} {exc}".rstrip()) from None
    try:
        doc = loads(raw) if len(raw) <= MAX_BODY_BYTES else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise AuthServerError(f"{url}: HTTP {status}, no JSON object")
    return status, doc


async def discover(http: aiohttp.ClientSession, upstream_url: str, seconds: float,
                   extra: tuple[tuple[str, str], ...] = ()) -> Discovered | None:
    """The upstream's protection, from its 401 to a request without a token; None when it answers otherwise."""
    call = build_discover("gateway-login", SessionView(capabilities={}))
    try:
        async with http.post(upstream_url, data=dumps(call.body), headers={**dict(extra), **call.headers},
                             allow_redirects=False,
                             timeout=aiohttp.ClientTimeout(total=seconds)) as resp:
            if resp.status != 401:
                return None
            challenges = tuple(resp.headers.getall("WWW-Authenticate", ()))
    except (aiohttp.ClientError, TimeoutError):
        return None  # the request itself fails the same way and says so
    try:
        found = read_protection(await get_json(http, resource_metadata_location(challenges, upstream_url),
                                               seconds=seconds))
    except AuthServerError as exc:
        raise CredentialError(f"the upstream asks for a token, but its metadata cannot be read: {exc}") from None
    if isinstance(found, str):
        raise CredentialError(f"the upstream asks for a token, but {found}")
    if not resource_covers(found.resource, upstream_url):
        raise CredentialError(f"the upstream's metadata names the resource {found.resource}, not {upstream_url}")
    issuer = found.authorization_servers[0]
    try:
        metadata = await Issuer(issuer, lambda: http, time.time, timeout=seconds).metadata()
    except AuthServerError as exc:
        raise CredentialError(str(exc)) from None
    scope = next((p.get("scope") for s, p in map(challenge_params, challenges) if s == "bearer"), None)
    return Discovered(found, issuer, metadata, scope)


@contextlib.asynccontextmanager
async def loopback(port: int, state: str) -> AsyncIterator[tuple[int, asyncio.Future[str | tuple[str, str]]]]:
    """A callback server on 127.0.0.1 (RFC 8252 §7.3) for one authorization response: its port and the code (or
    the refusal). A callback with another state is answered 400 and waited past (RFC 6749 §10.12)."""
    answer: asyncio.Future[str | tuple[str, str]] = asyncio.get_running_loop().create_future()

    async def callback(request: web.Request) -> web.Response:
        result = callback_code(request.query_string, state)
        status, text = callback_page(result, answer.done())
        if not answer.done() and not (isinstance(result, tuple) and result[0] == "invalid_state"):
            answer.set_result(result)
        return web.Response(status=status, text=text)

    app = web.Application()
    app.router.add_get(CALLBACK_PATH, callback)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        yield runner.addresses[0][1], answer
    finally:
        await runner.cleanup()


class UserLogin(UpstreamCredentials):
    """The user's token for the upstream, in the upstream client's credential seam: ``header()`` discovers (once),
    loads the stored token, refreshes it when due, runs the flow when there is none; ``forget()`` after an
    upstream 401 makes the next ``header()`` refresh once, else run the flow again. One at a time (a lock): the
    requests that arrive during a login wait for its token rather than start logins of their own."""

    def __init__(self, settings: LoginSettings, clock: Callable[[], float] = time.time,
                 random: Callable[[int], bytes] = os.urandom) -> None:
        super().__init__(CredentialSettings(Grant.LOGIN, settings.upstream_url), clock)
        self.login, self._random = settings, random
        self.folder = TokenFolder(settings.token_dir)
        self._lock = asyncio.Lock()
        self._discovered: Discovered | None = None
        self._looked = False  # discovery ran (and found the upstream protected, or not)
        self._stored: StoredToken | None = None
        self._refused = False  # the upstream refused the current token
        self._refreshed_after_refusal = False
        self.flows = self.refreshes = 0  # logins run and tokens refreshed (tests and the banner read them)

    async def header(self, client_authorization: str | None) -> str | None:
        async with self._lock:
            token = await self._usable()
        return f"Bearer {token.issued.token}" if token is not None else None

    def forget(self, client_authorization: str | None) -> None:
        self._refused = True

    async def _usable(self) -> StoredToken | None:
        found = await self._discovery()
        if found is None:
            return None
        token = self._stored or load_token(self.folder.read(token_file_name(found.issuer, found.protection.resource)),
                                          found.issuer, found.protection.resource)
        refused, self._refused = self._refused, False
        if token is not None and (refused or refresh_due(token, self._clock(), self.login.refresh_before_seconds)):
            retry_refresh = not (refused and self._refreshed_after_refusal)
            token = await self._refresh(found, token) if token.refresh_token and retry_refresh else None
            self._refreshed_after_refusal = refused and token is not None
        if token is None:
            token = await self._flow(found)
            self._refreshed_after_refusal = False
        if token is not self._stored:
            self.folder.write(token_file_name(found.issuer, token.resource), dump_token(token))
            self._stored = token
        return token

    async def _discovery(self) -> Discovered | None:
        """Once; again when an upstream that asked for nothing refused (it was protected meanwhile)."""
        if not self._looked or (self._discovered is None and self._refused):
            self._discovered = await discover(self._http(), self.login.upstream_url, self.login.timeout_seconds,
                                              self.login.headers)
            self._looked = True
            if self._discovered is None:
                self._refused = False
        return self._discovered

    async def _refresh(self, found: Discovered, token: StoredToken) -> StoredToken | None:
        """RFC 6749 §6 with the client the token was issued to; None (so the flow runs) when it is refused."""
        assert token.refresh_token is not None
        client = token.client or ClientRegistration(self.login.client_id or "")
        form = refresh_form(token.refresh_token, client.client_id, token.resource)
        status, answer = await self._post(found.endpoint("token_endpoint"), form, client)
        fresh = read_user_token(answer, self._clock(), found.issuer, token.resource, self._kept(client), token) \
            if status == 200 else None
        if isinstance(fresh, str) or fresh is None:
            self.login.say(f"{self.login.program}: the stored token for {token.resource} could not be refreshed "
                           f"({answer.get('error', fresh)}); logging in again")
            return None
        self.refreshes += 1
        return fresh

    def _kept(self, client: ClientRegistration) -> ClientRegistration:
        """The client as the token file keeps it: a configured client's secret stays in the environment (it is
        the user's, given by ``--client-secret-env``); a registered client's is kept, nothing else knows it."""
        if self.login.client_id and client.client_id == self.login.client_id:
            return ClientRegistration(client.client_id, client.redirect_uri)
        return client

    async def _post(self, url: str, form: dict[str, str], client: ClientRegistration) -> tuple[int, dict[str, Any]]:
        """A token-endpoint request: a confidential client authenticates (RFC 6749 §2.3.1), a public one names
        itself in the form."""
        secret = client.client_secret or (self.login.client_secret if client.client_id == self.login.client_id
                                          else None)
        basic = (client.client_id, secret) if secret else None
        try:
            return await post_json(self._http(), url, form=form, basic=basic, seconds=self.login.timeout_seconds)
        except AuthServerError as exc:
            raise CredentialError(str(exc)) from None

    async def _flow(self, found: Discovered) -> StoredToken:
        grant = self.login.grant
        if grant is LoginGrant.NONE:
            raise CredentialError(f"the upstream asks for a token from {found.issuer}, and login is off (--grant)")
        self.flows += 1
        scopes = scopes_to_ask(found.challenge_scope, found.protection.scopes_supported, self.login.scopes)
        if grant is LoginGrant.CLIENT_CREDENTIALS:
            client = ClientRegistration(self.login.client_id or "", None, self.login.client_secret)
            form = client_credentials_form(found.protection.resource, scopes)
            return await self._issued(found, client, form)
        if grant is LoginGrant.DEVICE_CODE:
            return await asyncio.wait_for(self._device(found, scopes), self.login.login_timeout_seconds)
        return await self._authorization_code(found, scopes)

    async def _issued(self, found: Discovered, client: ClientRegistration, form: dict[str, str]) -> StoredToken:
        status, answer = await self._post(found.endpoint("token_endpoint"), form, client)
        token = read_user_token(answer, self._clock(), found.issuer, found.protection.resource, self._kept(client)) \
            if status == 200 else f"HTTP {status} {answer.get('error', '')}: {answer.get('error_description', '')}"
        if isinstance(token, str):
            raise CredentialError(f"the token request at {found.issuer} failed: {token}")
        return token

    async def _client(self, found: Discovered, redirect_uri: str | None) -> ClientRegistration:
        """The configured client, else the one registered at this issuer before (its redirect URI's port may
        differ: RFC 8252 §7.3 lets a native client's loopback port vary), else a new registration."""
        if self.login.client_id:
            return ClientRegistration(self.login.client_id, redirect_uri, self.login.client_secret)
        known = load_client(self.folder.read(client_file_name(found.issuer)))
        if known is not None and (redirect_uri is None) == (known.redirect_uri is None):
            return ClientRegistration(known.client_id, redirect_uri, known.client_secret)
        endpoint = found.endpoint("registration_endpoint")
        try:
            status, answer = await post_json(self._http(), endpoint, body=registration_request(
                redirect_uri or "", self.login.grant), seconds=self.login.timeout_seconds)
        except AuthServerError as exc:
            raise CredentialError(f"client registration failed: {exc}") from None
        client = read_registration(answer, redirect_uri) if status in (200, 201) else \
            f"HTTP {status} {answer.get('error', '')}: {answer.get('error_description', '')}"
        if isinstance(client, str):
            raise CredentialError(f"client registration at {endpoint} failed: {client} (or pass --client-id)")
        self.folder.write(client_file_name(found.issuer), dump_client(client))
        return client

    async def _authorization_code(self, found: Discovered, scopes: tuple[str, ...]) -> StoredToken:
        """The browser flow: the URL on stderr (and in a browser when one can be shown), the code at the loopback
        callback, exchanged with the PKCE verifier."""
        if not supports_s256(found.metadata):
            raise CredentialError(f"the authorization server {found.issuer} does not list PKCE S256: refused")
        challenge, state = pkce(self._random(32)), state_of(self._random(16))
        async with loopback(0, state) as (port, answer):
            client = await self._client(found, f"http://127.0.0.1:{port}{CALLBACK_PATH}")
            assert client.redirect_uri is not None
            url = authorization_url(found.endpoint("authorization_endpoint"), client.client_id, client.redirect_uri,
                                    challenge, state, found.protection.resource, scopes)
            self.login.say(f"{self.login.program}: {found.protection.resource} needs a login at {found.issuer}; "
                           f"open: {url}")
            if self.login.open_browser and can_open_browser(os.environ, sys.platform):
                await asyncio.get_running_loop().run_in_executor(None, webbrowser.open, url)
            try:
                result = await asyncio.wait_for(answer, self.login.login_timeout_seconds)
            except TimeoutError:
                raise CredentialError(f"no login within {self.login.login_timeout_seconds:.0f} s") from None
        if isinstance(result, tuple):
            why = f"the authorization server refused the login: {result[0]} ({result[1][:MAX_SAID_CHARS]})"
            self.login.say(f"{self.login.program}: {why}")
            raise CredentialError(why)
        form = code_form(result, client.redirect_uri, challenge, client.client_id, found.protection.resource)
        return await self._issued(found, client, form)

    async def _device(self, found: Discovered, scopes: tuple[str, ...]) -> StoredToken:
        """RFC 8628: the code and where to enter it on stderr, then the token endpoint polled at the interval."""
        client = await self._client(found, None)
        status, answer = await self._post(found.endpoint("device_authorization_endpoint"),
                                          device_form(client.client_id, found.protection.resource, scopes), client)
        device = read_device_authorization(answer) if status == 200 else f"HTTP {status} {answer.get('error')}"
        if isinstance(device, str):
            raise CredentialError(f"the device authorization at {found.issuer} failed: {device}")
        self.login.say(f"{self.login.program}: {found.protection.resource} needs a login at {found.issuer}; on any "
                       f"device open {device.verification_uri} and enter the code {device.user_code}"
                       + (f" (or open: {device.verification_uri_complete})" if device.verification_uri_complete
                          else ""))
        form = device_token_form(device.device_code, client.client_id, found.protection.resource)
        interval = device.interval
        while True:
            await asyncio.sleep(interval)
            status, answer = await self._post(found.endpoint("token_endpoint"), form, client)
            if status == 200:
                return await self._read(found, client, answer)
            poll = read_poll_error(answer)
            if poll is Poll.FAILED:
                raise CredentialError(f"the device login failed: {answer.get('error')} "
                                      f"({answer.get('error_description', '')})")
            interval += SLOW_DOWN_SECONDS if poll is Poll.SLOW_DOWN else 0.0

    async def _read(self, found: Discovered, client: ClientRegistration, answer: dict[str, Any]) -> StoredToken:
        token = read_user_token(answer, self._clock(), found.issuer, found.protection.resource, self._kept(client))
        if isinstance(token, str):
            raise CredentialError(f"the token answer of {found.issuer}: {token}")
        return token
