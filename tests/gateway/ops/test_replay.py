"""``python -m gateway replay``: every shipped scenario (config/scenarios/) against the reference core, each on a
fresh core, and the CLI's exit codes (1 for an unmet expectation, 2 for a bad file or nothing listening)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from gateway.ops.replay import load, replay
from modern_server.app import create_app as create_core
from modern_server.config import CoreConfig
from tests.gateway.conftest import gateway_cli

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = sorted((ROOT / "config" / "scenarios").glob("*.toml"))


async def cli(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    return await gateway_cli(tmp_path, "replay", *args)


def test_a_scenario_ships_for_every_tool_of_the_core() -> None:
    called = {step.name for path in SCENARIOS for step in load(str(path)).steps}
    assert called >= {"echo", "slow_count", "summarize_repo", "notes_delete", "workspace_scan", "notes_timeline",
                      "connect_service", "draft_note"}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
async def test_the_shipped_scenarios_pass_against_the_reference_core(aiohttp_server, tmp_path, path) -> None:
    """Every run: twice against the same core, the second run sees what the first changed."""
    core = await aiohttp_server(create_core(CoreConfig(database=str(tmp_path / "core.sqlite3"))))
    runs = await replay(str(core.make_url("/mcp")), [load(str(path)), load(str(path))], 30)
    assert [[r.failures for r in reports if not r.passed] for _source, reports in runs] == [[], []]


async def test_an_unmet_expectation_exits_1(aiohttp_server, tmp_path) -> None:
    core = await aiohttp_server(create_core(CoreConfig(database=str(tmp_path / "core.sqlite3"))))
    (tmp_path / "s.toml").write_text('[[step]]\ncall = "echo"\narguments = { text = "a" }\nexpect_text = "b"\n')
    code, out, _err = await cli(tmp_path, "s.toml", "--upstream", str(core.make_url("/mcp")), "--json")
    step = json.loads(out)["files"][0]["steps"][0]
    assert code == 1 and not step["passed"] and "expected text containing 'b'" in step["failures"][0]


async def test_a_bad_file_exits_2_naming_the_step_and_key(tmp_path) -> None:
    (tmp_path / "s.toml").write_text('[[step]]\ncall = "echo"\nexpect_rounds = "two"\n')
    code, _out, err = await cli(tmp_path, "s.toml", "--upstream", "http://127.0.0.1:9/mcp")
    assert code == 2 and "s.toml: step 1 (call echo): expect_rounds" in err


async def test_nothing_listening_exits_2(tmp_path) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out, _err = await cli(tmp_path, str(SCENARIOS[0]), "--upstream", f"http://127.0.0.1:{port}/mcp", "--json")
    assert code == 2 and f"cannot connect to 127.0.0.1:{port}: connection refused" in json.loads(out)["error"]
