"""``python -m gateway check --upstream URL`` in front of the reference core protected by a real authorization
server (node oidc-provider): the same login as the stdio door (its flags, its token folder, its refresh), so a
token the stdio door stored serves ``check`` without a login, and ``check`` alone logs in through the browser
flow (the test follows the printed URL) and stores what it got for the stdio door. The core only ever accepts
tokens whose audience is its own URL; no token reaches check's output."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.auth.oidc import AuthorizationServer, authorization_server
from tests.gateway.auth.test_upstream_credentials import Core, start_core
from tests.gateway.ops.test_stdio_login import ROOT, follow_login, session_run, stored


@pytest.fixture
async def issuer() -> Any:
    async with authorization_server(ttl_seconds=300) as server:
        yield server


async def check(tmp_path: Path, core: Core, name: str, *flags: str) -> tuple[int, dict[str, Any], str, list[str]]:
    """``check --upstream`` on the core's echo tool with the stdio door's token folder: exit status, the JSON
    report, stderr, and the logins it asked for (followed as a browser would)."""
    errlog, logins = tmp_path / f"{name}.stderr", list[str]()
    browser = asyncio.create_task(follow_login(errlog, logins))
    try:
        with errlog.open("w") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway", "check", "--upstream", core.url, "--tools", "echo", "--json",
                "--timeout", "30", "--token-dir", str(tmp_path / "tokens"), "--no-browser", *flags,
                cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=err)
            out, _ = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        browser.cancel()
        await asyncio.gather(browser, return_exceptions=True)
    return proc.returncode or 0, json.loads(out), errlog.read_text(), logins


def echo_ok(report: dict[str, Any]) -> bool:
    return [(t["name"], t["status"]) for t in report["tools"]] == [("echo", "ok")]


async def test_check_uses_the_token_the_stdio_door_stored(aiohttp_server: Any, tmp_path: Path,
                                                          issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
    logins, _, _ = await session_run(tmp_path, core, "stdio")
    [token] = stored(tmp_path)
    before = len(core.accepted)
    code, report, stderr, logins = await check(tmp_path, core, "check")
    assert code == 0 and echo_ok(report), (report, stderr)
    assert logins == [] and "needs a login" not in stderr
    assert [t["access_token"] for t in stored(tmp_path)] == [token["access_token"]]
    assert len(core.accepted) > before and {a.aud for a in core.accepted} == {(core.url,)}
    assert token["access_token"] not in stderr + json.dumps(report)


async def test_check_logs_in_and_the_stdio_door_reuses_it(aiohttp_server: Any, tmp_path: Path,
                                                          issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
    code, report, stderr, logins = await check(tmp_path, core, "check")
    assert code == 0 and echo_ok(report), (report, stderr)
    assert len(logins) == 1 and "check: " in stderr and "needs a login" in stderr
    [token] = stored(tmp_path)
    assert token["resource"] == core.url and token["access_token"] not in stderr
    logins, _, result = await session_run(tmp_path, core, "stdio")
    assert logins == [] and not result.is_error
    assert {a.aud for a in core.accepted} == {(core.url,)} and {a.sub for a in core.accepted} == {"test-user"}


async def test_check_refreshes_an_expired_token(aiohttp_server: Any, tmp_path: Path) -> None:
    async with authorization_server(ttl_seconds=4) as issuer:
        core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
        await check(tmp_path, core, "first")
        [before] = stored(tmp_path)
        await asyncio.sleep(4.5)  # sleep: the access token expired; the refresh token did not
        code, report, stderr, logins = await check(tmp_path, core, "second")
        [after] = stored(tmp_path)
    assert code == 0 and echo_ok(report) and logins == []
    assert after["access_token"] != before["access_token"] and after["access_token"] not in stderr
    assert all(status != 401 for auth, status in core.seen if auth is not None)  # no expired token was sent


async def test_without_a_login_check_says_why(aiohttp_server: Any, tmp_path: Path,
                                              issuer: AuthorizationServer) -> None:
    core = await start_core(aiohttp_server, tmp_path, issuer.issuer, scopes_supported=("mcp:tools",))
    code, report, _, logins = await check(tmp_path, core, "none", "--grant", "none")
    assert code == 2 and logins == [] and "401" in report["server"]["error"], report
