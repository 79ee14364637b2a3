"""The operator's second hour (issue 37), as subprocesses: a malformed ``--upstream`` refused in one line before
anything is printed, ``reload`` refusing a file the gateway does not serve, ``stdio``'s banner, usage database and
desktop configuration, and ``check-config`` naming every problem in plain words."""

from __future__ import annotations

import pytest

from tests.gateway.ops.test_cli_errors import cli, hup_catcher, one_line_error

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


def test_reload_refuses_a_file_other_than_the_one_served(tmp_path) -> None:
    served, other = tmp_path / "served.toml", tmp_path / "other.toml"
    served.write_text("[gateway]\nport = 9000\n")
    other.write_text("[gateway]\nport = 9001\n")
    target = hup_catcher("serve", "--config", str(served))
    try:
        run = cli("reload", "--pid", str(target.pid), "--config", str(other))
        err = one_line_error(run, f"reload: not sent: process {target.pid} serves {served}, not {other}")
        assert run.returncode == 2 and err.count("\n") == 1
        assert target.poll() is None  # no signal was sent
    finally:
        target.kill()
        target.wait()


def test_reload_refuses_a_gateway_serving_no_file(tmp_path) -> None:
    """Without --config the gateway has no SIGHUP handler: the signal would stop it."""
    target = hup_catcher("serve", "--port", "0")
    try:
        run = cli("reload", "--pid", str(target.pid))
        one_line_error(run, f"process {target.pid} serves no configuration file (started without --config)")
        assert run.returncode == 2 and target.poll() is None
    finally:
        target.kill()
        target.wait()
