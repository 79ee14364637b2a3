"""``serve --workers N``: N gateway processes on one port, for a machine's cores.

Each worker is a full ``serve`` bound with ``SO_REUSEPORT``, so the kernel spreads new connections among them;
nothing routes by session. That only works when every worker sees every session: the workers need a shared
session store (Redis), through which a client's answer, cancel or DELETE reaching another worker is relayed to
the one running the request (docs/design.md §34); with the in-memory store ``serve`` refuses to start. This
process only supervises: it starts the workers, passes SIGTERM, SIGINT and SIGHUP on to them, and when one ends
it stops the others and exits with that worker's status.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from gateway.config.settings import GatewayConfig


def refusal(config: GatewayConfig, workers: int) -> str | None:
    """Why ``workers`` processes cannot serve this configuration, or None."""
    if workers > 1 and not config.store.url:
        return (f"--workers {workers} needs a shared session store (--store redis://HOST:PORT/DB or "
                "[gateway.store] url): with the in-memory store each worker would hold only its own sessions")
    return None


def worker_argv(argv: Sequence[str]) -> list[str]:
    """``serve``'s own arguments for one worker: no --workers, no --pid-file (this process has it)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--workers", "--pid-file"):
            skip = True
            continue
        if not arg.startswith(("--workers=", "--pid-file=")):
            out.append(arg)
    return [*out, "--reuse-port"]


def supervise(argv: Sequence[str], workers: int) -> int:
    command = [sys.executable, "-m", "gateway", "serve", *worker_argv(argv)]
    children = [subprocess.Popen(command) for _ in range(workers)]

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while all(child.poll() is None for child in children):
        time.sleep(0.2)
    ended = next(child for child in children if child.poll() is not None)
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        child.wait()
    return ended.returncode or 0
