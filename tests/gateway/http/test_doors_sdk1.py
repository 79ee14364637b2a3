"""The WebSocket and HTTP+SSE doors, driven by the official Python SDK's 1.x-line clients we did not write:
``mcp.client.websocket.websocket_client`` (subprotocol ``mcp``) and the 1.x ``mcp.client.sse.sse_client``.

The project's environment pins the 2.x SDK, which ships no WebSocket client, so the 1.x SDK lives in its own
virtual environment (no system site-packages) built once under the system temporary directory, keyed by the
pinned version and the interpreter, and reused by later runs. ``sdk1_client.py`` runs in it as a subprocess:
the bridged flows against a gateway with the embedded core, and a client killed while a sampling request waits
for its answer, which must leave nothing running upstream and no session state behind."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config.settings import load_config
from gateway.http.app import GATEWAY, create_app
from tests.gateway.conftest import FakeUpstream, Legacy
from tests.gateway.http.test_door_disconnect import left_nothing_behind, script
from tests.waiting import until

SDK1 = "1.30.0"
CLIENT = Path(__file__).with_name("sdk1_client.py")
DOORS = {"ws": "websocket", "sse": "http_sse"}  # the client's door argument, the transport label it gets


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _works(venv: Path) -> bool:
    check = "import importlib.metadata as m, mcp.client.websocket, mcp.client.sse; print(m.version('mcp'))"
    try:
        out = subprocess.run([str(_venv_python(venv)), "-I", "-c", check], capture_output=True, text=True,
                             timeout=60, check=False)
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.strip() == SDK1


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder at a time: two runs at once (two workers, two checkouts) wait for each other."""
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(final: Path) -> str | None:
    """Build the venv next to ``final`` and rename it into place (a half-built venv is never seen as ready);
    the reason it could not be built, or None."""
    scratch = Path(tempfile.mkdtemp(prefix=final.name + ".building-", dir=final.parent))
    try:
        steps = [[sys.executable, "-m", "venv", str(scratch)],
                 [str(_venv_python(scratch)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  "--timeout", "30", "--retries", "2",
                  f"mcp[ws]=={SDK1}"]]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=300, check=False)
            if done.returncode != 0:
                said = [line for line in (done.stderr or done.stdout).splitlines() if "WARNING" not in line]
                return f"{' '.join(step[2:4])} failed: {' '.join(said[-2:])[-300:]}"
        if not _works(scratch):
            return f"the venv built in {scratch} cannot import mcp {SDK1}'s websocket and sse clients"
        if final.exists():
            shutil.rmtree(final)
        scratch.rename(final)
        return None
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"building the venv failed: {error}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def sdk1_python() -> Path:
    """The interpreter of a venv holding the official ``mcp`` 1.x SDK (and its ``websockets`` extra) only."""
    base = Path(tempfile.gettempdir())
    final = base / f"mcp-legacy-gateway-sdk1-{SDK1}-py{sys.version_info.major}.{sys.version_info.minor}"
    with _locked(base / f"{final.name}.lock"):
        if not _works(final):
            reason = _build(final)
            if reason is not None:
                pytest.skip(f"no venv with the official mcp {SDK1} SDK (PyPI unreachable?): {reason}")
    return _venv_python(final)


def _client_env() -> dict[str, str]:
    """The client's environment: nothing that points it at the project's packages (it also runs with -I)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


async def run_sdk1_script(python: Path, script: Path, *args: str) -> dict[str, Any]:
    """Run one of these tests' client scripts with the mcp 1.x venv's ``python`` (isolated from the project)
    and return the JSON summary it prints last; fails with its stderr when it exits non-zero."""
    proc = await asyncio.create_subprocess_exec(str(python), "-I", str(script), *args,
                                                env=_client_env(), cwd=tempfile.gettempdir(),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    summary: dict[str, Any] = json.loads(out.decode().splitlines()[-1])
    return summary


NOTES = [{"id": "n-1001", "title": "Standup", "uri": "file:///work/notes/2026/standup-a.md"},
         {"id": "n-1002", "title": "Standup", "uri": "file:///work/notes/2026/standup-b.md"},
         {"id": "n-1004", "title": "Ideas", "uri": "file:///work/notes/ideas/sqlite.md"},
         {"id": "n-1003", "title": "Roadmap", "uri": "file:///work/notes/roadmap.md"}]
FILES = ["README.md", "pyproject.toml", "src/app/__init__.py"]
# Each flow's result as the 1.x client saw it, and the requests the gateway sent that client during the flow
# (live, on the client's stream or socket, while the upstream's MRTR rounds waited).
EXPECTED = {
    "initialize": {"protocolVersion": "2025-11-25", "server": "mcp-reference-core", "asked": []},
    "echo": {"isError": False, "text": "plain", "structured": None, "asked": []},
    "summarize_repo": {"isError": False, "text": "Files: " + ", ".join(FILES) + "\n\nA parser and a gateway.",
                       "structured": {"files": FILES, "summary": "A parser and a gateway."},
                       "asked": ["sampling/createMessage", "sampling/createMessage"]},
    "workspace_scan": {"isError": False, "structured": {"notes": NOTES, "scanned": ["file:///work/notes"],
                                                        "skipped": []},
                       "text": "Scanned 1 root(s), skipped 0.\n" + "\n".join(f"{n['title']}: {n['uri']}"
                                                                             for n in NOTES),
                       "asked": ["roots/list"]},
    "notes_delete_accept": {"isError": False, "text": "Deleted 'Roadmap' (file:///work/notes/roadmap.md).",
                            "structured": {"deleted": "n-1003"}, "asked": ["elicitation/create"]},
    "notes_delete_decline": {"isError": False, "text": "Declined: nothing was deleted.",
                             "structured": {"deleted": None}, "asked": ["elicitation/create"]},
    "draft_note": {"text": "Write a short formal note about release.", "asked": ["elicitation/create"]},
}


def _requests(text: str, client: str) -> dict[tuple[str, str], float]:
    """(method, transport label) -> requests counted in /metrics for one client."""
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "mcp_gateway_requests_total" and s.labels.get("client") == client:
                key = (s.labels["method"], s.labels["transport"])
                counts[key] = counts.get(key, 0) + s.value
    return counts


@pytest.mark.parametrize("door", list(DOORS))
async def test_the_bridged_flows_with_the_1x_sdk_client(door: str, sdk1_python: Path, aiohttp_server: Any,
                                                        tmp_path: Path) -> None:
    # /metrics labels only known client names (docs/reference/metrics.md, "Label bound"): this one is made known.
    server = await aiohttp_server(create_app(load_config(usage={"db": str(tmp_path / "usage.db"),
                                                                "flush_seconds": 3600,
                                                                "known_clients": [f"sdk1-{door}"]})))
    base = str(server.make_url("")).rstrip("/")
    summary = await run_sdk1_script(sdk1_python, CLIENT, door, base, "flows")
    assert summary == EXPECTED
    async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics") as metrics:
        text = await metrics.text()
    label = DOORS[door]
    # tools/list: the 1.x client reads the tool list once to validate structured results
    assert _requests(text, f"sdk1-{door}") == {("initialize", label): 1, ("tools/list", label): 1,
                                               ("tools/call", label): 5, ("prompts/get", label): 1,
                                               ("ping", label): 1}


@asynccontextmanager
async def _vanishing(python: Path, door: str, base: str) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(str(python), "-I", str(CLIENT), door, base, "vanish",
                                                env=_client_env(), cwd=tempfile.gettempdir(),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def _line(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line, "the 1.x client ended before it was killed"
    message: dict[str, Any] = json.loads(line)
    return message


@pytest.mark.parametrize("door", list(DOORS))
async def test_a_1x_client_killed_mid_round_leaves_nothing_behind(door: str, sdk1_python: Path,
                                                                  upstream: FakeUpstream, make_gateway: Any) -> None:
    closed = asyncio.Event()
    script(upstream, closed)
    client = await make_gateway()
    gw, base = client.server.app[GATEWAY], str(client.make_url("")).rstrip("/")
    other = Legacy(client)
    await other.initialize()
    baseline = set(asyncio.all_tasks())
    async with _vanishing(sdk1_python, door, base) as proc:
        assert await _line(proc) == {"protocolVersion": "2025-11-25"}
        assert await _line(proc) == {"asked": "sampling/createMessage"}  # the round waits for this client
        await until(lambda: any(b["params"]["name"] == "hang" for b in upstream.calls("tools/call")),
                    "the hanging call reached the upstream")
        assert await gw.store.count_sessions("anonymous") == (2, 2)
        proc.kill()  # gone without answering: its door ends the session, which ends both requests
    await left_nothing_behind(client, upstream, other, closed, baseline)
