"""The stdio door driven by the official TypeScript SDK: its ``StdioClientTransport`` launches
``python -m gateway stdio`` (embedded core) and runs a tool call with live sampling, a prompt with live
elicitation and a plain call (``tests/conformance/door_client.mjs``). The door's usage records say ``stdio``."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

from tests.gateway.ts_sdk import ROOT, door_client


async def test_the_typescript_sdk_over_stdio(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'[gateway.usage]\ndb = "{tmp_path / "usage.sqlite3"}"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    checks = await door_client(tmp_path, "stdio", sys.executable, str(tmp_path), "--config", str(config), env=env)
    assert len(checks) == 6, checks
    with sqlite3.connect(tmp_path / "usage.sqlite3") as db:
        rows = db.execute("SELECT transport, client, method, SUM(count) FROM usage GROUP BY 1, 2, 3").fetchall()
    assert {(transport, client) for transport, client, _, _ in rows} == {("stdio", "ts-sdk-stdio")}
    assert {method for _, _, method, _ in rows} >= {"initialize", "tools/call", "prompts/get"}
