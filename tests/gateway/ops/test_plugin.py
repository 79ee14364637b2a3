"""The pytest plugin's mechanics beyond the documented example: a URL upstream, an unanswered live request, and
the plugin as an installed user loads it (``-p``, pytest-asyncio strict mode, ``legacy_upstream`` not set)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.ops.testing import LegacyCallError
from modern_server.app import create_app
from modern_server.config import CoreConfig

pytest_plugins = ["gateway.ops.testing"]
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
async def legacy_upstream(aiohttp_server, tmp_path) -> str:
    core = await aiohttp_server(create_app(CoreConfig(database=str(tmp_path / "core.sqlite3"))))
    return str(core.make_url("/mcp"))


async def test_a_url_upstream_and_a_plain_call(legacy_client, legacy_gateway, legacy_upstream) -> None:
    result = await legacy_client.call_tool("echo", {"text": "hi"})
    assert result["content"] == [{"type": "text", "text": "hi"}]
    assert legacy_gateway.upstream == legacy_upstream and legacy_client.requests == []
    assert legacy_client.rounds == 1


async def test_a_live_request_without_a_callback_fails_the_call(legacy_client) -> None:
    with pytest.raises(LegacyCallError) as caught:
        await legacy_client.call_tool("summarize_repo")
    assert [r.method for r in legacy_client.requests] == ["sampling/createMessage"]
    assert caught.value.code is not None and "tools/call" in str(caught.value)


async def test_a_full_sampling_result_is_sent_as_given(legacy_client) -> None:
    picked = '["README.md", "pyproject.toml", "src/app/cli.py"]'
    results = iter([picked, {"role": "assistant", "content": {"type": "text", "text": "Done."}, "model": "m"}])
    legacy_client.on_sampling(lambda request: next(results))
    result = await legacy_client.call_tool("summarize_repo")
    assert result["structuredContent"]["summary"] == "Done."


STRICT_EXAMPLE = '''
import pytest
from modern_server.app import create_app
from modern_server.config import CoreConfig

@pytest.fixture
def legacy_upstream(tmp_path):
    return create_app(CoreConfig(database=str(tmp_path / "core.sqlite3")))

@pytest.mark.asyncio
async def test_echo(legacy_client):
    assert (await legacy_client.call_tool("echo", {"text": "x"}))["content"][0]["text"] == "x"

@pytest.mark.asyncio
async def test_forgot_the_upstream(legacy_client):
    pass
'''


def _pytest(tmp_path: Path, source: str, selected: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_mine.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "gateway.ops.testing",
                           "-o", "asyncio_mode=strict", "--rootdir", str(tmp_path), "-k", selected, "test_mine.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False)


def test_loaded_with_p_in_strict_mode_as_an_installed_user_would(tmp_path) -> None:
    out = _pytest(tmp_path, STRICT_EXAMPLE, "echo")
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_forgotten_upstream_fixture_says_what_to_do(tmp_path) -> None:
    out = _pytest(tmp_path, STRICT_EXAMPLE.replace("def legacy_upstream", "def not_the_upstream"), "forgot")
    assert out.returncode == 1 and "override the legacy_upstream fixture" in out.stdout
