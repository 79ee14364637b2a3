"""The embedded core's state: its database beside the usage database (or in a temporary folder removed at
exit when there is none), the operator's workspace added to the anonymous principal's workspaces, and its
requestState key shared by the processes on one store."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gateway.config.settings import load_config
from gateway.upstream.embedded import (
    CORE_DATABASE,
    STATE_KEY_FILE,
    STATE_KEY_ID,
    KeySource,
    SharedKey,
    StateKeyError,
    embedded_core,
    embedded_settings,
    shared_key_refusal,
    state_dir,
    state_key,
)


async def test_the_core_database_lives_beside_the_usage_database(tmp_path: Path) -> None:
    config = load_config(usage={"db": str(tmp_path / "usage.sqlite3")})
    async with embedded_core(config) as url:
        assert url is not None and (tmp_path / CORE_DATABASE).exists()
    assert (tmp_path / CORE_DATABASE).exists()  # notes outlive a restart


async def test_without_a_usage_database_nothing_is_left_behind() -> None:
    with state_dir(load_config()) as folder:
        kept = folder
        assert folder.is_dir()
    assert not kept.exists()


def test_the_state_dir_and_the_workspace_are_the_operators(tmp_path: Path) -> None:
    config = load_config(state_dir=str(tmp_path / "state"), embedded_workspace=str(tmp_path))
    with state_dir(config) as folder:
        core = embedded_settings(config, folder)
    assert Path(core.database or "").parent == tmp_path / "state"
    assert core.workspaces["anonymous"] == ("file:///work/notes", tmp_path.resolve().as_uri())


def test_the_state_key_is_one_file_shared_by_every_process_using_the_folder(tmp_path: Path) -> None:
    """Owner-only, created once: a second process (here a second call) reads the same key; the core seals with
    it under the gateway's key id."""
    config = load_config(state_dir=str(tmp_path / "state"))
    first, second = state_key(config, {}), state_key(config, {})
    path = tmp_path / "state" / STATE_KEY_FILE
    assert first.source is KeySource.FILE and first.where == str(path)
    assert first.secret == second.secret == path.read_text().strip() and len(first.secret or "") == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no draft left behind
    with state_dir(config) as folder:
        core = embedded_settings(config, folder)
    assert [(k.id, k.secret) for k in core.state_keys] == [(STATE_KEY_ID, first.secret)]


def test_the_state_key_from_the_environment_or_the_core_file(tmp_path: Path) -> None:
    config = load_config(state_dir=str(tmp_path), embedded_state_key_env="GW_KEY")
    assert state_key(config, {"GW_KEY": "s" * 40}) == SharedKey(KeySource.ENV, "s" * 40, "GW_KEY")
    with pytest.raises(StateKeyError, match="embedded_state_key_env names GW_KEY, which is not set"):
        state_key(config, {})
    core_file = tmp_path / "core.toml"
    core_file.write_text('[[state_keys]]\nid = "mine"\nsecret = "core-secret"\n')
    assert state_key(load_config(core_config=str(core_file)), {}).source is KeySource.CORE_CONFIG
    assert state_key(load_config(), {}).source is KeySource.PROCESS  # no folder: one process, its own key
    assert not (tmp_path / STATE_KEY_FILE).exists()


async def test_a_shared_store_without_a_shared_key_is_refused() -> None:
    no_folder = load_config(store={"url": "redis://127.0.0.1:1/0"})
    assert "needs a state key all its processes share" in (await shared_key_refusal(no_folder, {}) or "")
    assert await shared_key_refusal(load_config(), {}) is None  # the memory store: one process
    assert await shared_key_refusal(load_config(upstream_url="http://u/mcp", store={"url": "redis://h/0"}),
                                    {}) is None  # no embedded core
