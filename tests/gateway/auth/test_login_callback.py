"""The stdio login's loopback callback (RFC 8252 §7.3) over real HTTP: a callback without the login's ``state``,
or with another one, is refused with a page saying why and the login goes on waiting for its own answer (RFC 6749
§10.12); the authorization server's ``error=`` answer ends the login with a page and a stderr line naming the
error; a callback after the login ended changes nothing. End to end: the stdio door in front of the OAuth-protected
core (node oidc-provider) takes none of the forged callbacks, and after a refused login the next session logs in."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from adapters.oauth_client import CALLBACK_PATH
from gateway.auth.login import loopback
from tests.gateway.auth.oidc import AuthorizationServer, authorization_server
from tests.gateway.auth.test_upstream_credentials import start_core
from tests.gateway.ops.test_stdio_login import URL_LINE, door, session_run, stored
from tests.waiting import until


@pytest.fixture
async def issuer() -> Any:
    async with authorization_server(ttl_seconds=300) as server:
        yield server


async def test_the_callback_takes_only_its_own_state() -> None:
    async with loopback(0, "the-state") as (port, answer), httpx2.AsyncClient() as browser:
        url = f"http://127.0.0.1:{port}{CALLBACK_PATH}"
        missing = await browser.get(url, params={"code": "c1"})
        other = await browser.get(url, params={"code": "c2", "state": "another"})
        refused_elsewhere = await browser.get(url, params={"error": "access_denied", "state": "another"})
        assert not answer.done()
        taken = await browser.get(url, params={"code": "c3", "state": "the-state"})
        late = await browser.get(url, params={"code": "c4", "state": "the-state"})
    assert missing.status_code == 400 and "the callback carries no state" in missing.text
    assert other.status_code == 400 and "not the one this login sent" in other.text
    assert refused_elsewhere.status_code == 400 and "still waits for its own" in refused_elsewhere.text
    assert taken.status_code == 200 and "Logged in" in taken.text
    assert late.status_code == 409 and "already ended" in late.text
    assert answer.result() == "c3"


async def test_an_error_callback_ends_the_login_saying_why() -> None:
    async with loopback(0, "the-state") as (port, answer), httpx2.AsyncClient() as browser:
        page = await browser.get(f"http://127.0.0.1:{port}{CALLBACK_PATH}", params={
            "error": "access_denied", "error_description": "the user said no\nreally", "state": "the-state"})
    assert page.status_code == 400 and page.headers["content-type"].startswith("text/plain")
    assert "refused by the authorization server: access_denied (the user said no really)" in page.text
    assert answer.result() == ("access_denied", "the user said no\nreally")


async def printed_url(errlog: Path, seen: int = 0) -> str:
    """The (seen+1)-th authorization URL the process printed on stderr."""
    def printed() -> list[str]:
        found = URL_LINE.findall(errlog.read_text() if errlog.exists() else "")
        return found if len(found) > seen else []
    found = await until(printed, f"authorization URL {seen + 1} printed")
    return str(found[seen])


def callback_of(url: str) -> tuple[str, str]:
    """The loopback redirect URI and the state of an authorization URL."""
    query = parse_qs(urlsplit(url).query)
    return query["redirect_uri"][0], query["state"][0]


async def forge_then_log_in(errlog: Path) -> list[httpx2.Response]:
    """Someone else's callbacks first (no state, another state, an error under another state), then the user's
    own login through the authorization server."""
    url = await printed_url(errlog)
    callback, state = callback_of(url)
    async with httpx2.AsyncClient(follow_redirects=True, max_redirects=10) as browser:
        forged = [await browser.get(callback, params={"code": "forged"}),
                  await browser.get(callback, params={"code": "forged", "state": state + "x"}),
                  await browser.get(callback, params={"error": "access_denied", "state": state + "x"})]
        return [*forged, await browser.get(url)]


async def test_the_stdio_login_takes_none_of_the_forged_callbacks(aiohttp_server: Any, tmp_path: Path,
                                                                  issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
    errlog = tmp_path / "forged.stderr"
    user = asyncio.create_task(forge_then_log_in(errlog))
    try:
        with errlog.open("w") as err:
            async with Client(stdio_client(door(tmp_path, core), errlog=err), mode="legacy") as session:
                result = await asyncio.wait_for(session.call_tool("echo", {"text": "hi"}), 60)
        *forged, login = await asyncio.wait_for(user, 30)
    finally:
        user.cancel()
        await asyncio.gather(user, return_exceptions=True)
    assert [page.status_code for page in forged] == [400, 400, 400]
    assert all("still waits for its own" in page.text for page in forged)
    assert login.status_code == 200 and "Logged in" in login.text
    assert not result.is_error and result.content[0].text == "hi"
    assert {a.aud for a in core.accepted} == {(core.url,)} and len(stored(tmp_path)) == 1


async def refuse(errlog: Path) -> httpx2.Response:
    """The user says no: the authorization server's error answer at the process's callback."""
    callback, state = callback_of(await printed_url(errlog))
    async with httpx2.AsyncClient() as browser:
        return await browser.get(callback, params={
            "error": "access_denied", "error_description": "End-User aborted interaction", "state": state})


async def test_a_refused_login_is_said_and_the_next_session_logs_in(aiohttp_server: Any, tmp_path: Path,
                                                                    issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
    errlog = tmp_path / "refused.stderr"
    user = asyncio.create_task(refuse(errlog))
    with pytest.raises(BaseExceptionGroup) as raised:  # initialize already needs the upstream, so its login
        with errlog.open("w") as err:
            async with Client(stdio_client(door(tmp_path, core), errlog=err), mode="legacy") as session:
                await asyncio.wait_for(session.call_tool("echo", {"text": "hi"}), 60)
    page = await asyncio.wait_for(user, 30)
    refused = raised.value.subgroup(lambda e: isinstance(e, MCPError))
    said = "the authorization server refused the login: access_denied (End-User aborted interaction)"
    assert page.status_code == 400 and "access_denied (End-User aborted interaction)" in page.text
    assert refused is not None and said in str(refused.exceptions)
    assert f"gateway stdio: {said}" in errlog.read_text()
    assert stored(tmp_path) == [] and core.accepted == []
    logins, _, result = await session_run(tmp_path, core, "again")
    assert len(logins) == 1 and not result.is_error and len(stored(tmp_path)) == 1
