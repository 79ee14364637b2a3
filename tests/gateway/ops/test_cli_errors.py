"""The command line's operator mistakes: each one line on stderr and a non-zero exit, never a traceback; and
``reload --config`` refusing to signal a file the gateway would refuse, and the pid file going away at exit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(*args: str, module: str = "gateway") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=120)


def one_line_error(run: subprocess.CompletedProcess[str], *expected: str) -> str:
    err = run.stderr
    assert run.returncode not in (0, None), err
    assert "Traceback" not in err, err
    for text in expected:
        assert text in err, err
    return err


def test_port_already_in_use(tmp_path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        run = cli("serve", "--port", str(port), "--usage-db", str(tmp_path / "u.sqlite3"),
                  "--pid-file", str(tmp_path / "gw.pid"))
    one_line_error(run, f"cannot listen on 127.0.0.1:{port}: Address already in use")
    assert not (tmp_path / "gw.pid").exists()  # removed at exit, however it ended


def test_a_missing_config_file(tmp_path) -> None:
    missing = tmp_path / "nope.toml"
    one_line_error(cli("serve", "--config", str(missing), "--usage-db", str(tmp_path / "u.sqlite3")),
                   f"{missing}: no such file")
    one_line_error(cli("check-config", str(missing)), f"{missing}: no such file")


def test_a_bad_port_blames_the_flag(tmp_path) -> None:
    for bad in ("70000", "http", "-1"):
        err = one_line_error(cli("serve", "--port", bad, "--usage-db", str(tmp_path / "u.sqlite3")),
                             f"argument --port: '{bad}' is not a port number")
        assert "(defaults)" not in err


def test_report_with_a_bad_since(tmp_path) -> None:
    one_line_error(cli("report", "--since", "7x", "--db", str(tmp_path / "u.sqlite3")),
                   "argument --since: must look like 30d, 4w or 24h, not '7x'")


def test_reload_with_a_missing_or_bad_pid_file(tmp_path) -> None:
    one_line_error(cli("reload", "--pid-file", str(tmp_path / "gw.pid")),
                   f"reload: cannot read pid file {tmp_path / 'gw.pid'}: No such file or directory")
    (tmp_path / "junk.pid").write_text("hello\n")
    one_line_error(cli("reload", "--pid-file", str(tmp_path / "junk.pid")), "does not hold a process id")


def typo(key: str, near: str) -> str:
    return f"{key}: unknown key (did you mean {near!r}?)"


def hup_catcher(*args: str) -> subprocess.Popen[str]:
    """A process that exits 7 on SIGHUP, so a test sees whether ``reload`` signalled it; ``args`` are on its command
    line (``serve --config FILE``: what reload reads to know the file it serves)."""
    code = ("import signal, sys, time\nsignal.signal(signal.SIGHUP, lambda *a: sys.exit(7))\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_reload_validates_the_file_before_signalling(tmp_path) -> None:
    served = tmp_path / "gw.toml"
    target = hup_catcher("serve", "--config", str(served))
    try:
        served.write_text("[gateway]\nprot = 1\n")
        one_line_error(cli("reload", "--pid", str(target.pid), "--config", str(served)),
                       "the gateway would refuse the file", typo("gateway.prot", "port"))
        one_line_error(cli("reload", "--pid", str(target.pid)),  # the file it serves, read from its command line
                       "the gateway would refuse the file", typo("gateway.prot", "port"))
        assert target.poll() is None  # no signal was sent
        served.write_text("[gateway]\nport = 9000\n")
        run = cli("reload", "--pid", str(target.pid), "--config", str(served))
        assert run.returncode == 0 and f"sent SIGHUP to {target.pid}" in run.stdout
        assert target.wait(timeout=60) == 7
    finally:
        target.kill()
        target.wait()


def test_the_pid_file_is_removed_at_exit(tmp_path) -> None:
    pid_file = tmp_path / "gw.pid"
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", "0", "--pid-file", str(pid_file),
                             "--usage-db", str(tmp_path / "u.sqlite3")], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        while "Running on" not in (line := proc.stdout.readline()):  # serving: start-up is over
            assert line, "serve ended before listening"
        assert pid_file.read_text().strip() == str(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert not pid_file.exists()


def test_check_config_lists_every_problem_with_suggestions(tmp_path) -> None:
    path = tmp_path / "typos.toml"
    path.write_text('[gateway]\nprot = 1\nhots = "x"\n[gateway.limits]\nmax_round = 2\n'
                    '[[peers]]\nname = "a"\nupstrem = "x"\n[gatewy]\n')
    one_line_error(cli("check-config", str(path)),
                   typo("gateway.prot", "port"),
                   typo("gateway.hots", "host"),
                   typo("gateway.limits.max_round", "max_rounds"),
                   typo("peer 'a'.upstrem", "upstream"),
                   typo("gatewy", "gateway"))


def test_check_config_recognises_a_core_configuration() -> None:
    core = ROOT / "config" / "core.example.toml"
    one_line_error(cli("check-config", str(core)),
                   f"this is a core configuration: use `python -m modern_server check-config {core}`")


def test_modern_server_check_config(tmp_path) -> None:
    core = ROOT / "config" / "core.example.toml"
    run = cli("check-config", str(core), module="modern_server")
    assert run.returncode == 0 and run.stdout.startswith(f"ok: {core}"), run.stderr
    bad = tmp_path / "core.toml"
    bad.write_text('server_nam = "x"\nmax_rounds = "many"\n')
    one_line_error(cli("check-config", str(bad), module="modern_server"), "server_nam", "max_rounds")
