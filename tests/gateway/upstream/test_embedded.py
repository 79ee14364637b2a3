"""The embedded core's state: its database beside the usage database (or in a temporary folder removed at
exit when there is none), and the operator's workspace added to the anonymous principal's workspaces."""

from __future__ import annotations

from pathlib import Path

from gateway.config.settings import load_config
from gateway.upstream.embedded import CORE_DATABASE, embedded_core, embedded_settings, state_dir


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
