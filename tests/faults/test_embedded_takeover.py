"""Replicas running the embedded core share its ``requestState`` key (gateway.upstream.embedded): three
``python -m gateway serve`` processes without ``--upstream`` on one Redis, and the replica holding a round killed
with SIGKILL while its client is answering an elicitation. The answer lands on a survivor, which takes the round
over and retries it on its own embedded core, which opens the state the dead one sealed. And the start-up
refusals when the processes on a store would not share the key."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.faults.procs import ROOT, Proc
from tests.faults.replicas import Front
from tests.gateway.session import test_redis_store as redis_tests

pytest.importorskip("redis")
redis_url, prefix = redis_tests.redis_url, redis_tests.prefix  # its fixtures, shared


def embedded_replica(tmp: Path, name: str, redis_url: str, prefix: str, state: Path, extra: str = "") -> Proc:
    config = tmp / f"{name}.toml"
    config.write_text(f'[gateway]\nsse_retry_ms = 100\nstate_dir = "{state}"\n{extra}\n'
                      f'[gateway.store]\nprefix = "{prefix}"\nlease_seconds = 1.0\n')
    return Proc(name, ["-m", "gateway", "serve", "--store", redis_url, "--port", "{port}", "--config", str(config),
                       "--usage-db", str(tmp / f"{name}-usage.sqlite3"), "--no-access-log"], tmp)


async def test_the_replica_holding_an_elicitation_dies_and_a_survivor_finishes_the_call(
        tmp_path: Path, redis_url: str, prefix: str) -> None:
    state = tmp_path / "state"  # one folder for all three: one key file, one core database
    replicas = [embedded_replica(tmp_path, f"r{n}", redis_url, prefix, state) for n in range(3)]
    front = Front([r.port for r in replicas])  # every connection to the first replica alive
    killed: list[int] = []

    async def confirm_after_killing(context: Any, params: Any) -> Any:
        import mcp_types as types

        if not killed:  # the client is answering: the replica holding the round dies now
            replicas[0].proc.kill()
            replicas[0].proc.wait()
            killed.append(replicas[0].proc.pid)
        choice = params.requested_schema["properties"]["note_id"]["enum"][0]
        return types.ElicitResult(action="accept", content={"note_id": choice, "confirm": True})
    try:
        for one in replicas:
            await one.listening(60)
        url = await front.start()
        key = state / "embedded-state.key"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        async with Client(url, mode="legacy", elicitation_callback=confirm_after_killing) as client:
            result = await asyncio.wait_for(client.call_tool(
                "notes_delete", {"workspaceUri": "file:///work/notes", "title": "Standup"}), 60)
            assert killed and not replicas[0].alive()
            assert not result.is_error, result
            assert result.content[0].text.startswith("Deleted")
            assert (await client.call_tool("echo", {"text": "after"})).content[0].text == "after"
        assert front.used[1] > 0  # a survivor served the rest
        for one in replicas[1:]:
            assert one.alive() and "integrity check" not in one.stderr()
            assert "Traceback" not in one.stderr(), one.stderr()[-3000:]
    finally:
        await front.close()
        for one in replicas:
            one.stop()


def _serve(tmp: Path, config: Path, redis_url: str, name: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", "serve", "--store", redis_url, "--port", "0",
                           "--config", str(config), "--usage-db", str(tmp / f"{name}.sqlite3")], cwd=tmp,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, capture_output=True, text=True,
                          timeout=60)


def _refused(run: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert run.returncode not in (0, None) and "Traceback" not in run.stderr, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("gateway: ")]
    assert len(lines) == 1 and all(text in lines[0] for text in expected), run.stderr
    assert "serving legacy MCP" not in run.stderr


async def test_a_replica_with_another_key_is_refused_at_start(tmp_path: Path, redis_url: str, prefix: str) -> None:
    """Two state folders (two machines' worth) on one store: the second replica's key file is another key."""
    first = embedded_replica(tmp_path, "first", redis_url, prefix, tmp_path / "here")
    try:
        await first.listening(60)
        other = tmp_path / "other.toml"
        other.write_text(f'[gateway]\nstate_dir = "{tmp_path / "there"}"\n[gateway.store]\nprefix = "{prefix}"\n')
        _refused(_serve(tmp_path, other, redis_url, "other"), "the embedded core's state key",
                 str(tmp_path / "there" / "embedded-state.key"), "embedded_state_key_env", "state_dir")
    finally:
        first.stop()


def test_a_key_variable_that_is_not_set_is_refused(tmp_path: Path, redis_url: str, prefix: str) -> None:
    config = tmp_path / "g.toml"
    config.write_text(f'[gateway]\nembedded_state_key_env = "TEST_GW_STATE_KEY"\n'
                      f'[gateway.store]\nprefix = "{prefix}"\n')
    os.environ.pop("TEST_GW_STATE_KEY", None)
    _refused(_serve(tmp_path, config, redis_url, "g"), "embedded_state_key_env names TEST_GW_STATE_KEY",
             "not set")
