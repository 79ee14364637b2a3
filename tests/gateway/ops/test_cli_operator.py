"""The operator's second hour (issue 37), as subprocesses: a malformed ``--upstream`` refused in one line before
anything is printed, ``reload`` refusing a file the gateway does not serve, ``stdio``'s banner, usage database and
desktop configuration, and ``check-config`` naming every problem in plain words."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway.ops.test_cli_errors import ENV, ROOT, cli, hup_catcher, one_line_error

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


INITIALIZE = ('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
              '"capabilities":{},"clientInfo":{"name":"desk-app","version":"1"}}}\n'
              '{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
              '{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n')


def _one_session(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A desktop client's session: initialize, tools/list, then stdin closes once both answers arrived."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INITIALIZE)
    proc.stdin.flush()
    lines = [proc.stdout.readline(), proc.stdout.readline()]
    out, err = proc.communicate(timeout=60)
    assert all('"result"' in line for line in lines), (lines, err)
    return subprocess.CompletedProcess(command, proc.returncode, "".join(lines) + out, err)


def test_stdio_prints_one_banner_line_and_records_usage_by_default(tmp_path) -> None:
    run = _one_session([sys.executable, "-m", "gateway", "stdio"], tmp_path, ENV)
    banners = [line for line in run.stderr.splitlines() if line.startswith("gateway stdio:")]
    db = tmp_path / "gateway-usage.sqlite3"
    assert banners == [f"gateway stdio: one 2025-11-25 session on stdin/stdout; upstream: the embedded core; "
                       f"usage database: {db}"], run.stderr
    assert "Traceback" not in run.stderr and run.returncode == 0
    report = cli("report", "--db", str(db))
    assert report.returncode == 0 and "desk-app" in report.stdout, report.stdout
    assert "transports: stdio" in report.stdout, report.stdout


def test_stdio_print_config_launches_from_a_desktop_clients_bare_environment(tmp_path) -> None:
    """The printed entry works where a desktop client runs it: another working directory, a PATH without the
    virtual environment, no PYTHONPATH."""
    run = cli("stdio", "--print-config", "legacy-gateway", "--usage-db", "records/u.sqlite3")
    assert run.returncode == 0, run.stderr
    entry = json.loads(run.stdout)["mcpServers"]["legacy-gateway"]
    assert entry["command"] == sys.executable and os.path.isabs(entry["command"])
    assert entry["args"] == ["-m", "gateway", "stdio", "--usage-db", str(ROOT / "records" / "u.sqlite3")]
    entry["args"][-1] = str(tmp_path / "u.sqlite3")  # the same entry, its database where a test may write
    elsewhere = tmp_path / "desktop"
    elsewhere.mkdir()
    session = _one_session([entry["command"], *entry["args"]], elsewhere, {"PATH": "/usr/bin:/bin"})
    assert session.returncode == 0 and "Traceback" not in session.stderr, session.stderr
    assert (tmp_path / "u.sqlite3").exists()
    upstream = cli("stdio", "--print-config", "x", "--upstream", "http://127.0.0.1:19110/mcp", "--token-env", "T")
    args = json.loads(upstream.stdout)["mcpServers"]["x"]["args"]
    assert args[3:7] == ["--upstream", "http://127.0.0.1:19110/mcp", "--token-env", "T"]


def test_check_config_names_every_problem_in_plain_words_in_one_run(tmp_path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[gateway]\nport = "19101"\nbridge_subscriptions = "yes"\n[gateway.limits]\nmax_rounds = 2.5\n'
                    '[[peers]]\nname = "alpha"\nupstream = "nowhere"\ncanary = { default = 80, other = 30 }\n'
                    '[[peers]]\nname = "alpha"\n[[peers]]\nname = "beta"\nupsteam = "x"\n')
    run = cli("check-config", str(path))
    err = one_line_error(run, "gateway.port: must be an integer, not the string '19101'",
                         "gateway.bridge_subscriptions: must be true or false, not the string 'yes'",
                         "gateway.limits.max_rounds: must be an integer, not 2.5",
                         "peer 'alpha': canary percentages must be >= 0 and add up to at most 100",
                         "duplicate peer name(s): alpha",
                         "peer 'alpha' names unknown upstream(s): nowhere, other",
                         "peer 'beta'.upsteam: unknown key (did you mean 'upstream'?)")
    assert run.returncode == 2 and err.count("\n") == 1
    assert not any(words in err for words in ("Value error", "(top level)", "Extra inputs", "peers.", "Input should"))


def test_check_config_warns_of_a_sunset_already_past(tmp_path) -> None:
    path = tmp_path / "sunset.toml"
    path.write_text('[[peers]]\nname = "old-ide"\nclient_name = "x"\nsunset = 2020-01-01\n'
                    '[[peers]]\nname = "later"\nclient_name = "y"\nsunset = 2099-01-01\n')
    run = cli("check-config", str(path))
    assert run.returncode == 0 and run.stdout.startswith(f"ok: {path}"), run.stderr
    assert run.stderr == ("warning: peer 'old-ide': its sunset 2020-01-01 has passed: its clients' legacy revisions "
                          "are refused now\n")
