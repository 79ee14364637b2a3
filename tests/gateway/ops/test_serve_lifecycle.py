"""``serve``'s start and stop as an operator sees them, each through a real process: the banner only once the
port is bound and naming the session store, one line with the right hint for each reason a port cannot be
bound, the folders of the files it writes created before serving (or refused in one line), a trace that cannot
be written stopping start-up, and Ctrl-C with a call in flight ending within the shutdown budget with a final
"stopped" line."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from tests.faults.procs import Proc, faulty_upstream
from tests.faults.test_door_floods import upstream_hanging
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def serve(tmp: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``serve`` that is expected to end by itself (a refusal)."""
    return subprocess.run([sys.executable, "-m", "gateway", "serve", *args], cwd=tmp, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def refused(run: subprocess.CompletedProcess[str], *expected: str) -> list[str]:
    """A refusal: non-zero exit, no traceback, the expected words on one line; returns stderr's lines."""
    assert run.returncode not in (0, None), run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.strip().splitlines()
    assert any(all(text in line for text in expected) for line in lines), run.stderr
    return lines


def test_port_in_use_is_said_before_any_banner(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        run = serve(tmp_path, "--port", str(port), "--usage-db", str(tmp_path / "u.db"))
    lines = refused(run, f"cannot listen on 127.0.0.1:{port}: Address already in use", "--port")
    assert not any("serving legacy MCP" in line for line in lines), run.stderr


def test_an_address_not_of_this_machine_gets_its_own_hint(tmp_path: Path) -> None:
    run = serve(tmp_path, "--host", "10.255.255.1", "--port", "0", "--usage-db", str(tmp_path / "u.db"))
    lines = refused(run, "cannot listen on 10.255.255.1:0", "not an address of this machine", "--host")
    assert not any("another process holds the port" in line or "serving legacy MCP" in line for line in lines)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may bind a privileged port")
def test_a_privileged_port_gets_its_own_hint(tmp_path: Path) -> None:
    refused(serve(tmp_path, "--port", "80", "--usage-db", str(tmp_path / "u.db")),
            "cannot listen on 127.0.0.1:80: Permission denied", "1024")


def test_each_listen_error_gets_its_own_hint() -> None:
    """The hints by errno (EACCES cannot be provoked as root, so the table is read here too)."""
    from gateway.ops.connections import listen_refusal

    def said(code: int) -> str | None:
        return listen_refusal(OSError(code, os.strerror(code)), "h", 80)
    assert "another process holds the port" in (said(errno.EADDRINUSE) or "")
    assert "h is not an address of this machine" in (said(errno.EADDRNOTAVAIL) or "")
    assert (said(errno.EACCES) or "").startswith("cannot listen on h:80: Permission denied (ports below 1024")
    assert said(errno.EMFILE) is None  # not the operator's choice of address: left to its traceback
    unresolved = listen_refusal(socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "nope", 1)
    assert unresolved == "cannot listen on nope:1: nope does not resolve (Name or service not known): pick an " \
                         "address with --host"


def test_a_host_that_does_not_resolve(tmp_path: Path) -> None:
    refused(serve(tmp_path, "--host", "no-such-host.invalid", "--port", "0", "--usage-db", str(tmp_path / "u.db")),
            "cannot listen on no-such-host.invalid:0", "--host")


def test_files_in_a_folder_that_cannot_be_made_are_refused_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"  # a file where a folder should be: no user, root included, can make it
    blocker.write_text("")
    for flag in ("--pid-file", "--usage-db", "--trace"):
        extra = [] if flag == "--usage-db" else ["--usage-db", str(tmp_path / "u.db")]
        run = serve(tmp_path, "--port", "0", *extra, flag, str(blocker / "var" / "f"))
        lines = refused(run, flag, str(blocker / "var"), "Not a directory")
        assert not any("serving legacy MCP" in line for line in lines), run.stderr


def test_a_trace_file_that_cannot_be_written_stops_start_up(tmp_path: Path) -> None:
    trace = tmp_path / "var" / "trace.jsonl"
    trace.mkdir(parents=True)  # a folder where the file should be
    lines = refused(serve(tmp_path, "--port", "0", "--usage-db", str(tmp_path / "u.db"), "--trace", str(trace)),
                    "--trace", str(trace), "Is a directory")
    assert not any("serving legacy MCP" in line for line in lines)


async def _started(proc: subprocess.Popen[str], lines: list[str], seconds: float = 60) -> str:
    """Read stderr until the banner; return it."""
    assert proc.stderr is not None
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = await loop.run_in_executor(None, proc.stderr.readline)
        if not line:
            break
        lines.append(line)
        if "serving legacy MCP" in line:
            return line
    raise AssertionError("no banner: " + "".join(lines))


async def test_the_readme_commands_make_their_folders_and_the_banner_follows_the_bind(tmp_path: Path) -> None:
    """``--pid-file var/gateway.pid --usage-db var/usage.sqlite3 --trace var/trace.jsonl`` from a fresh folder:
    ``var/`` is made, the banner names the bound port (not 0) and the session store, and the trace is written."""
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", "0",
                             "--pid-file", "var/gateway.pid", "--usage-db", "var/usage.sqlite3",
                             "--trace", "var/trace.jsonl"], cwd=tmp_path, env=ENV, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines: list[str] = []
    try:
        banner = await _started(proc, lines)
        assert "session store: memory" in banner, banner
        port = int(banner.split("http://127.0.0.1:")[1].split("/")[0])
        assert port != 0
        assert (tmp_path / "var" / "gateway.pid").read_text().strip() == str(proc.pid)
        async with aiohttp.ClientSession() as http, http.post(
                f"http://127.0.0.1:{port}/mcp", headers=ACCEPT, json={
                    "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}}) as resp:
            assert resp.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, "".join(lines) + out
    assert "Traceback" not in "".join(lines) + out
    assert (tmp_path / "var" / "usage.sqlite3").exists()
    assert '"initialize"' in (tmp_path / "var" / "trace.jsonl").read_text()
    assert out.strip().splitlines()[-1].endswith("gateway stopped"), out


@pytest.mark.parametrize("upstream_kind", ["faulty", "embedded"])
async def test_ctrl_c_with_a_call_in_flight_ends_within_the_shutdown_budget(tmp_path: Path,
                                                                            upstream_kind: str) -> None:
    """A call hanging upstream (a server that never answers; the embedded core's ``slow_count`` for 20 s): SIGINT
    ends the process within ``shutdown_timeout_seconds = 2`` and a little, with "gateway stopped" last."""
    upstream = faulty_upstream(tmp_path) if upstream_kind == "faulty" else None
    config = tmp_path / "g.toml"
    config.write_text("[gateway]\nshutdown_timeout_seconds = 2\nupstream_read_timeout_seconds = 60\n")
    where = ["--upstream", upstream.url] if upstream is not None else []
    gateway = Proc("gateway", ["-m", "gateway", "serve", *where, "--port", "{port}", "--config", str(config),
                               "--usage-db", str(tmp_path / "u.db")], tmp_path)
    call = {"name": "hang", "arguments": {"nonce": "n"}} if upstream is not None else \
        {"name": "slow_count", "arguments": {"n": 20, "delay": 1}}
    try:
        if upstream is not None:
            await upstream.listening()
        await gateway.listening()
        async with aiohttp.ClientSession() as http:
            async with http.post(gateway.url, headers=ACCEPT, json={
                    "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}}) as resp:
                session = resp.headers["Mcp-Session-Id"]
            headers = {**ACCEPT, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
            pending = asyncio.create_task(http.post(gateway.url, headers=headers, json={
                "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}))
            if upstream is not None:
                await until(lambda: upstream_hanging(upstream), "the call hangs upstream")
            else:
                await asyncio.sleep(1.5)  # sync: the embedded core's slow_count is under way; nothing outside says so
            assert not pending.done()
            started = time.monotonic()
            gateway.proc.send_signal(signal.SIGINT)
            code = await asyncio.get_running_loop().run_in_executor(None, gateway.proc.wait, 60)
            took = time.monotonic() - started
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        err = gateway.stderr()
        assert took < 4.0, f"{took:.1f} s\n{err}"
        assert code == 0, err
        assert "Traceback" not in err, err
        assert err.strip().splitlines()[-1].endswith("gateway stopped"), err
    finally:
        gateway.stop()
        if upstream is not None:
            upstream.stop()


def test_an_unset_state_key_variable_is_refused_by_serve_and_stdio(tmp_path: Path) -> None:
    config = tmp_path / "g.toml"
    config.write_text('[gateway]\nembedded_state_key_env = "TEST_UNSET_STATE_KEY"\n')
    env = {k: v for k, v in ENV.items() if k != "TEST_UNSET_STATE_KEY"}
    expected = "embedded_state_key_env names TEST_UNSET_STATE_KEY, which is not set"
    refused(subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", "0", "--config", str(config),
                            "--usage-db", str(tmp_path / "u.db")], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=60), "gateway: ", expected)
    run = subprocess.run([sys.executable, "-m", "gateway", "stdio", "--config", str(config)], cwd=tmp_path, env=env,
                         input="", capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    refused(run, "gateway stdio: ", expected)


def test_a_bad_core_config_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "core.toml").write_text("bogus = 1\n")
    config = tmp_path / "g.toml"
    config.write_text(f'[gateway]\ncore_config = "{tmp_path / "core.toml"}"\n')
    refused(serve(tmp_path, "--port", "0", "--config", str(config), "--usage-db", str(tmp_path / "u.db")),
            "gateway: [gateway] core_config: ", "core.toml: bogus")
