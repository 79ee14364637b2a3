"""Two real core processes share one SQLite file: one confirmation can be executed only once across both."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import aiohttp
import pytest

from tests.modern_server.conftest import CoreClient
from tests.waiting import accepts_sync, until_sync

WS = "file:///work/notes"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def two_cores(tmp_path):
    cfg = tmp_path / "core.toml"
    cfg.write_text(f'database = "{tmp_path / "shared.sqlite3"}"\n'
                   '[[state_keys]]\nid = "shared"\nsecret = "one-secret-for-both"\n')
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "modern_server", "--port", str(p), "--config", str(cfg)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for p in ports]
    try:
        for port in ports:
            _wait_listening(port)
        yield [f"http://127.0.0.1:{p}/mcp" for p in ports]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def _wait_listening(port: int) -> None:
    until_sync(lambda: accepts_sync(port), f"the core on port {port} starts")


async def test_one_confirmation_executes_once_across_processes(two_cores):
    async with aiohttp.ClientSession() as session:
        a, b = CoreClient(session, two_cores[0]), CoreClient(session, two_cores[1])
        args = {"workspaceUri": WS, "title": "Standup"}
        first = await a.tool("notes_delete", args)
        state = first.result["requestState"]
        answer = {"delete_choice": {"action": "accept", "content": {"note_id": "n-1001", "confirm": True}}}
        replies = await asyncio.gather(*(c.tool("notes_delete", args, requestState=state, inputResponses=answer)
                                         for c in (a, b, a, b)))
        # One of them deleted the note; the others are the same step resent and get its recorded result.
        assert [r.result for r in replies] == [replies[0].result] * 4
        assert replies[0].result["structuredContent"] == {"deleted": "n-1001"}
        other = {"delete_choice": {"action": "accept", "content": {"note_id": "n-1002", "confirm": True}}}
        # Both processes now see the one deletion, and the state is spent on both for any other answer.
        for c in (a, b):
            listed = [r["uri"] for r in (await c.call("resources/list")).result["resources"]]
            assert "file:///work/notes/2026/standup-a.md" not in listed
            assert "file:///work/notes/2026/standup-b.md" in listed
            again = await c.tool("notes_delete", args, requestState=state, inputResponses=other)
            assert again.error["code"] == -32602 and "already used" in again.error["message"]
