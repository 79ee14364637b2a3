"""The core's configuration: the shipped example loads, and bad files fail at start naming the key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from modern_server.config import ConfigError, CoreConfig, load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "core.example.toml"


def test_example_loads_and_secrets_come_from_the_environment():
    config = load_config(EXAMPLE)
    ring, active = config.key_ring({"CORE_STATE_KEY": "s3cret"})
    assert active == "2026-12" and ring == {"2026-12": b"s3cret"}
    table = config.token_table({"CORE_TOKEN_ALICE": "alice-secret"})
    assert sorted(table.values()) == ["alice", "ci-bot"]
    assert "alice-secret" not in table  # only digests are kept
    with pytest.raises(ValueError, match="CORE_STATE_KEY"):
        config.key_ring({})


@pytest.mark.parametrize("text, where", [
    ("max_rounds = 0\n", "max_rounds"),
    ("surprise = 1\n", "surprise"),
    ('[[tokens]]\nprincipal = "a"\n', "tokens.0"),
    ('[[state_keys]]\nid = "has space"\nsecret = "x"\n', "state_keys.0.id"),
    ("max_rounds = [\n", "core.toml"),
])
def test_bad_files_name_the_key(tmp_path, text, where):
    path = tmp_path / "core.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and where in str(err.value)


def test_empty_anonymous_principal_requires_tokens():
    assert CoreConfig(anonymous_principal="").anonymous_principal is None
