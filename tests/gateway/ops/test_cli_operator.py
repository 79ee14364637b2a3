"""The operator's second hour (issue 37), as subprocesses: a malformed ``--upstream`` refused in one line before
anything is printed, ``reload`` refusing a file the gateway does not serve, ``stdio``'s banner, usage database and
desktop configuration, and ``check-config`` naming every problem in plain words."""

from __future__ import annotations

import pytest

from tests.gateway.ops.test_cli_errors import cli, one_line_error

MALFORMED = {
    "notaurl": "'notaurl' is not a URL",
    "localhost:19110/mcp": "is not a URL: give http://HOST:PORT/PATH or https://HOST/PATH (did you mean "
                           "'http://localhost:19110/mcp'?)",
    "ftp://example.com/mcp": "the scheme must be http or https, not 'ftp'",
    "http://": "'http://' names no host",
    "http://127.0.0.1:99999/mcp": "Port out of range",
}


@pytest.mark.parametrize("command", ["serve", "stdio", "check"])
@pytest.mark.parametrize("url", sorted(MALFORMED))
def test_a_malformed_upstream_is_one_line_and_exit_2_before_anything_else(command: str, url: str, tmp_path) -> None:
    run = cli(command, "--upstream", url, *(("--usage-db", str(tmp_path / "u.sqlite3")) if command == "serve"
                                             else ()))
    err = one_line_error(run, f"gateway {command}: --upstream ", MALFORMED[url])
    assert run.returncode == 2
    assert err.count("\n") == 1 and run.stdout == ""  # no banner, no probe line, no usage text
