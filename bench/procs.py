"""Child processes of the benchmark, and what ``/proc`` says about them (CPU seconds, resident memory)."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import IO, cast

TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scratch_usage_db() -> str:
    """A usage database in a directory removed at exit: a benchmark's gateway must never write the
    ``gateway-usage.sqlite3`` that the user's own ``serve`` and ``report`` use."""
    folder = tempfile.mkdtemp(prefix="gateway-bench-")
    atexit.register(shutil.rmtree, folder, True)
    return os.path.join(folder, "usage.sqlite3")


def scratch_config(text: str) -> str:
    """A gateway configuration file with ``text``, in a directory removed at exit."""
    folder = tempfile.mkdtemp(prefix="gateway-bench-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, "gateway.toml")
    with open(path, "w") as handle:
        handle.write(text)
    return path


def _cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid`` (utime, stime)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:  # a child that just ended
        return 0.0, 0.0
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def summed_times(times: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """User and system seconds added up, each apart."""
    user = system = 0.0
    for one_user, one_system in times:
        user, system = user + one_user, system + one_system
    return user, system


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


class Child:
    def __init__(self, name: str, args: list[str], tree: str | None = None, *, port: int | None = None,
                 python: str | None = None) -> None:
        """``tree``: run the module from that checkout of the project instead of this one (A/B runs); ``port``:
        the one ``{port}`` stands for (default: a free one), e.g. a restarted replica's, where its balancer sends;
        ``python``: another interpreter (a venv of its own, e.g. the 1.x SDK's), run with none of our PYTHON*."""
        self.name, self.port = name, port or free_port()
        cmd = [python or sys.executable, *[a.replace("{port}", str(self.port)) for a in args]]
        env = {**os.environ, "PYTHONPATH": tree} if tree else None
        if python is not None:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tree, env=env)
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        try:
            self._wait()
        except BaseException:  # one that never listened is not left running
            self.stop()
            raise
        # Its stderr is read from now on, the last lines kept: a pipe nobody reads fills (64 KiB) and the next
        # write blocks the child. The 1.x SDK server logs a line or two per request, and stopped answering at
        # all after about 1,500 calls of bench.reverse.
        self.tail: deque[bytes] = deque(maxlen=40)
        threading.Thread(target=self.tail.extend, args=(self.stderr,), daemon=True,
                         name=f"{name}-stderr").start()

    @property
    def stderr(self) -> IO[bytes]:
        """The child's stderr: always a pipe (``stderr=subprocess.PIPE`` above)."""
        return cast(IO[bytes], self.proc.stderr)

    def _wait(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.stderr.read().decode()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not start listening")

    def cpu_seconds(self) -> float:
        """CPU of the process and of its live children (``serve --workers N``: the workers)."""
        return sum(self.cpu_times())

    def cpu_times(self) -> tuple[float, float]:
        """:meth:`cpu_seconds` as user and system time: a send that wakes another process is system time, the
        Python around it user time (docs/benchmarks.md reads a bridged round's cost in both)."""
        return summed_times(_cpu_times(pid) for pid in (self.proc.pid, *_children(self.proc.pid)))

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
