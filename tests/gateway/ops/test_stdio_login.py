"""``python -m gateway stdio --upstream URL`` in front of the reference core protected by a real authorization
server (node oidc-provider; the core validates JWTs with its own URL as audience): the stdio process meets the
core's 401, discovers its metadata and the authorization server's, registers a public native client, prints the
authorization URL on stderr; the test follows it headlessly (the server's login and consent answer themselves)
to the process's loopback callback; the official SDK's stdio client then lists tools and calls one.

Also: the token file is owner-only and its tokens never reach stderr; a second run reuses the stored token without
a login; an expired token is refreshed with the refresh token; the core only ever accepted tokens whose audience is
its own URL; extra headers reach the upstream; bad flags are refused in one line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiohttp import web
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from modern_server.app import create_app as create_core
from modern_server.config import CoreConfig, OAuthConfig
from tests.gateway.auth.oidc import AuthorizationServer, authorization_server, free_port
from tests.gateway.auth.test_upstream_credentials import Core, start_core
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[3]
URL_LINE = re.compile(r"open: (http\S+)")


def door(tmp_path: Path, core: Core, *flags: str) -> StdioServerParameters:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return StdioServerParameters(command=sys.executable, env=env, cwd=str(tmp_path), args=[
        "-m", "gateway", "stdio", "--upstream", core.url, "--token-dir", str(tmp_path / "tokens"), "--no-browser",
        "--usage-db", str(tmp_path / "usage.sqlite3"), *flags])


async def follow_login(errlog: Path, logins: list[str]) -> None:
    """The user's browser: waits for the authorization URL on the process's stderr, then follows it through the
    authorization server's redirects to the process's loopback callback (a real HTTP request to it)."""
    seen = 0
    async with httpx2.AsyncClient(follow_redirects=True, max_redirects=10) as browser:
        while True:
            found = URL_LINE.findall(errlog.read_text() if errlog.exists() else "")
            for url in found[seen:]:
                logins.append(url)
                answer = await browser.get(url)
                assert answer.status_code == 200 and "Logged in" in answer.text, (answer.status_code, answer.text)
            seen = len(found)
            await asyncio.sleep(0.05)  # sleep: the fake user's look at the log, a file, until cancelled


async def session_run(tmp_path: Path, core: Core, name: str, *flags: str) -> tuple[list[str], str, Any]:
    """One desktop-client session through the stdio door: the logins it asked for, its stderr, a tool's result."""
    errlog, logins = tmp_path / f"{name}.stderr", list[str]()
    browser = asyncio.create_task(follow_login(errlog, logins))
    try:
        with errlog.open("w") as err:
            async with Client(stdio_client(door(tmp_path, core, *flags), errlog=err), mode="legacy") as session:
                tools = await asyncio.wait_for(session.list_tools(), 60)
                assert "summarize_repo" in {tool.name for tool in tools.tools}
                result = await asyncio.wait_for(session.call_tool("echo", {"text": "hi"}), 60)
    finally:
        browser.cancel()
        await asyncio.gather(browser, return_exceptions=True)
    return logins, errlog.read_text(), result


def stored(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "tokens").glob("token-*.json"))]


@pytest.fixture
async def issuer() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server(ttl_seconds=300) as server:
        yield server


async def test_the_browser_login_then_the_stored_token(aiohttp_server: Any, tmp_path: Path,
                                                       issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
    logins, stderr, result = await session_run(tmp_path, core, "first")
    assert len(logins) == 1 and not result.is_error and result.content[0].text == "hi"
    assert f"resource={core.url.replace(':', '%3A').replace('/', '%2F')}" in logins[0]
    assert "code_challenge_method=S256" in logins[0]
    folder, [token] = tmp_path / "tokens", stored(tmp_path)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in folder.iterdir())
    assert token["resource"] == core.url and token["issuer"] == issuer.issuer and token["refresh_token"]
    assert token["access_token"] not in stderr and token["refresh_token"] not in stderr
    first = len(core.accepted)
    assert first >= 2 and {a.aud for a in core.accepted} == {(core.url,)}

    logins, stderr, result = await session_run(tmp_path, core, "second")  # the stored token: no login
    assert logins == [] and "needs a login" not in stderr and not result.is_error
    assert [t["access_token"] for t in stored(tmp_path)] == [token["access_token"]]
    assert len(core.accepted) > first and {a.aud for a in core.accepted} == {(core.url,)}
    assert {a.sub for a in core.accepted} == {"test-user"}


async def test_an_expired_token_is_refreshed_not_logged_in_again(aiohttp_server: Any, tmp_path: Path) -> None:
    async with authorization_server(ttl_seconds=4) as issuer:
        core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
        logins, _, _ = await session_run(tmp_path, core, "first")
        [before] = stored(tmp_path)
        await asyncio.sleep(4.5)  # sleep: the access token expired; the refresh token did not
        logins, stderr, result = await session_run(tmp_path, core, "second")
        [after] = stored(tmp_path)
    assert logins == [] and not result.is_error
    assert after["access_token"] != before["access_token"] and after["expires_at"] > before["expires_at"]
    assert after["access_token"] not in stderr
    assert {a.aud for a in core.accepted} == {(core.url,)}
    assert all(status != 401 for auth, status in core.seen if auth is not None)  # no expired token was sent


async def test_a_refused_stored_token_is_refreshed_once(aiohttp_server: Any, tmp_path: Path,
                                                        issuer: AuthorizationServer) -> None:
    """A stored token the core refuses though it has not expired (here: issued for another audience): the core's
    401 makes the process refresh once, and the call goes through with the fresh token, without a login."""
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
    await session_run(tmp_path, core, "first")
    [path] = sorted((tmp_path / "tokens").glob("token-*.json"))
    wrong = await issuer.client_token("http://127.0.0.1:9/elsewhere/mcp")
    path.write_text(json.dumps({**json.loads(path.read_text()), "access_token": wrong}))
    logins, _, result = await session_run(tmp_path, core, "second")
    [after] = stored(tmp_path)
    assert logins == [] and not result.is_error and after["access_token"] != wrong
    assert (f"Bearer {wrong}", 401) in core.seen
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_extra_headers_reach_the_upstream(aiohttp_server: Any, tmp_path: Path,
                                                issuer: AuthorizationServer) -> None:
    seen: list[tuple[str | None, str | None]] = []
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    config = CoreConfig(database=str(tmp_path / "core.db"), anonymous_principal=None, oauth=OAuthConfig(
        issuer=issuer.issuer, resource=url, scopes_supported=("mcp:tools",)))

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "POST":
            seen.append((request.headers.get("X-Team"), request.headers.get("X-Trace-Tag")))
        response: web.StreamResponse = await handler(request)
        return response

    app = create_core(config)
    app.middlewares.append(record)
    await aiohttp_server(app, port=port)
    core = Core(url, app)
    headers_file = tmp_path / "headers.txt"
    headers_file.write_text("# team headers\nX-Team: blue\n\n")
    _, _, result = await session_run(tmp_path, core, "first", "--header", "X-Trace-Tag: t1",
                                     "--headers-file", str(headers_file))
    assert not result.is_error and len(seen) >= 3 and set(seen) == {("blue", "t1")}


DEVICE_LINE = re.compile(r"\(or open: (http\S+)\)")
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


async def confirm_device(errlog: Path, logins: list[str]) -> None:
    """The user on another device: opens the printed verification URL (the code filled in), posts the
    confirmation form, and follows the authorization server's login and consent to its success page."""
    async with httpx2.AsyncClient(follow_redirects=True, max_redirects=10) as browser:
        found = await until(lambda: DEVICE_LINE.findall(errlog.read_text() if errlog.exists() else ""))
        logins.append(found[0])
        page = await browser.get(found[0])
        form = dict(HIDDEN.findall(page.text))
        assert "xsrf" in form, page.text[:500]
        done = await browser.post(str(page.url.join("/device")), data={**form, "confirm": "yes"})
        assert done.status_code == 200 and "Success" in done.text, (done.status_code, done.text[:500])


async def test_the_device_code_login(aiohttp_server: Any, tmp_path: Path, issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
    errlog, logins = tmp_path / "device.stderr", list[str]()
    user = asyncio.create_task(confirm_device(errlog, logins))
    try:
        with errlog.open("w") as err:
            async with Client(stdio_client(door(tmp_path, core, "--grant", "device_code"), errlog=err),
                              mode="legacy") as session:
                result = await asyncio.wait_for(session.call_tool("echo", {"text": "hi"}), 90)
        await asyncio.wait_for(user, 10)
    finally:
        user.cancel()
        await asyncio.gather(user, return_exceptions=True)
    [token] = stored(tmp_path)
    assert len(logins) == 1 and not result.is_error and token["resource"] == core.url
    assert "enter the code" in errlog.read_text() and token["access_token"] not in errlog.read_text()
    assert core.accepted and {a.aud for a in core.accepted} == {(core.url,)}


@pytest.mark.parametrize(("flags", "said"), [
    (["--header", "Content-Type: text/plain"], "Content-Type is the gateway's to set"),
    (["--header", "no colon"], "not 'Name: value'"),
    (["--grant", "client_credentials"], "needs --client-id and --client-secret-env"),
    (["--client-secret-env", "TEST_STDIO_UNSET_SECRET"], "TEST_STDIO_UNSET_SECRET (--client-secret-env) is not set"),
    (["--headers-file", "/nonexistent/headers"], "--headers-file /nonexistent/headers"),
])
async def test_bad_login_flags_are_refused_in_one_line(tmp_path: Path, flags: list[str], said: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "stdio", "--upstream", "http://127.0.0.1:9/mcp", *flags,
        cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2 and out == b""
    assert said in err.decode() and len(err.decode().strip().splitlines()) == 1, err


async def test_the_client_credentials_login(aiohttp_server: Any, tmp_path: Path, issuer: AuthorizationServer,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``--grant client_credentials``: no browser, no registration; the configured client's token for the core
    is stored (its secret is not: it stays in the environment) and the next run reuses it."""
    monkeypatch.setenv("TEST_STDIO_CLIENT_SECRET", "secret-gateway-tests")
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
    flags = ("--grant", "client_credentials", "--client-id", "gateway-tests",
             "--client-secret-env", "TEST_STDIO_CLIENT_SECRET")
    logins, stderr, result = await session_run(tmp_path, core, "first", *flags)
    [token] = stored(tmp_path)
    assert logins == [] and not result.is_error and result.content[0].text == "hi"
    assert token["resource"] == core.url and token["access_token"] not in stderr
    assert not list((tmp_path / "tokens").glob("client-*"))  # a configured client is not registered
    assert all("secret-gateway-tests" not in p.read_text() for p in (tmp_path / "tokens").iterdir())
    assert {(a.client_id, a.aud) for a in core.accepted} == {("gateway-tests", (core.url,))}
    logins, _, result = await session_run(tmp_path, core, "second", *flags)
    assert logins == [] and not result.is_error
    assert [t["access_token"] for t in stored(tmp_path)] == [token["access_token"]]
