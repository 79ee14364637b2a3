"""``python -m modern_server``: one banner line once it listens, saying where, how states are sealed and where
notes are kept."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[2]


def _banner(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    deadline, seen = time.monotonic() + 60, []
    while time.monotonic() < deadline and (line := proc.stderr.readline()):
        seen.append(line)
        if "serving MCP" in line:
            return line
    raise AssertionError("no banner: " + "".join(seen))


async def test_the_core_prints_a_banner_once_bound(tmp_path: Path) -> None:
    config = tmp_path / "core.toml"
    config.write_text(f'database = "{tmp_path / "core.sqlite3"}"\n[[state_keys]]\nid = "k1"\nsecret = "s"\n')
    for extra, expected in (([], ["a random state key", "database: a temporary file"]),
                            (["--config", str(config)], ["state keys k1;", f"database: {tmp_path}"])):
        proc = subprocess.Popen([sys.executable, "-m", "modern_server", "--port", "0", *extra], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            line = _banner(proc)
            base = line.split("serving MCP 2026-07-28 at ")[1].split("/mcp")[0]
            assert not base.endswith(":0"), line
            for text in expected:
                assert text in line, line
            async with aiohttp.ClientSession() as http, http.get(f"{base}/mcp") as resp:
                assert resp.status == 405  # it listens where the banner says
        finally:
            proc.terminate()
            proc.wait(timeout=30)
