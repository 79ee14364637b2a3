"""Real processes for the fault suite: the faulty upstream and gateways, each with its output in a temp dir.

Every gateway gets ``--usage-db`` in the temp dir (``serve`` would otherwise write into the checkout) and a
``--config`` that lowers the timeouts the scenarios run into, so a hang ends in seconds, not minutes.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.procs import free_port
from tests.waiting import accepts, until

ROOT = Path(__file__).resolve().parents[2]  # the checkout under test (PYTHONPATH for every child)
READ_TIMEOUT, ANSWER_TIMEOUT, TOTAL_TIMEOUT = 2.0, 2.0, 6.0
CONFIG = f"""[gateway]
upstream_read_timeout_seconds = {READ_TIMEOUT}
upstream_connect_timeout_seconds = 2

[gateway.limits]
client_answer_timeout_seconds = {ANSWER_TIMEOUT}
total_timeout_seconds = {TOTAL_TIMEOUT}
"""


class Proc:
    """One child process on a free port; stdout and stderr go to files in ``tmp`` (never a full pipe);
    ``nofile``: the (soft, hard) RLIMIT_NOFILE it starts with."""

    def __init__(self, name: str, args: list[str], tmp: Path, nofile: tuple[int, int] | None = None) -> None:
        self.name, self.port = name, free_port()
        self.stderr_path = tmp / f"{name}.stderr"
        cmd = [sys.executable, *[a.replace("{port}", str(self.port)) for a in args]]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(tmp / f"{name}.stdout", "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, env=env, preexec_fn=None if nofile
                                         is None else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile))
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    async def listening(self, seconds: float = 30.0) -> None:
        def started() -> Any:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.stderr()[-2000:]}")
            return accepts(self.port)
        await until(started, f"{self.name} listens", seconds=seconds)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def faulty_upstream(tmp: Path) -> Proc:
    return Proc("upstream", [str(ROOT / "tests" / "faults" / "faulty_upstream.py"), "--port", "{port}"], tmp)


def gateway(tmp: Path, upstream_url: str, name: str = "gateway", extra_config: str = "",
            nofile: tuple[int, int] | None = None) -> Proc:
    """``extra_config``: TOML appended to :data:`CONFIG`, whose last table is ``[gateway.limits]``: keys before any
    table header of its own land there."""
    config = tmp / f"{name}.toml"
    config.write_text(CONFIG + extra_config)
    return Proc(name, ["-m", "gateway", "serve", "--upstream", upstream_url, "--port", "{port}", "--config",
                       str(config), "--usage-db", str(tmp / f"{name}-usage.sqlite3"), "--no-access-log"], tmp,
                nofile)
