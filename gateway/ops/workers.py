"""``serve --workers N``: N gateway processes on one port, for a machine's cores.

Each worker is a full ``serve`` bound with ``SO_REUSEPORT``, so the kernel spreads new connections among them;
nothing routes by session. That only works when every worker sees every session: the workers need a shared session
store (Redis), through which a client's answer, cancel or DELETE reaching another worker is relayed to the one
running the request (docs/design/replicas.md#replicas-relay-through-the-store); with the in-memory store ``serve``
refuses to start. This process only supervises: it starts the workers and passes SIGTERM, SIGINT and SIGHUP on to
them. A worker that ends on its own (killed, crashed) is logged in one line and started again after a backoff, while
the others go on serving: only its own in-flight requests are lost (a round saved in the shared store is taken over).
The one exception is start-up: a first worker ending with a status within :data:`STEADY_SECONDS` refused the
configuration (its one line says why), and every worker would refuse it the same way, so the service stops with that
status. SIGTERM or SIGINT stops every worker and then this process; should this process itself be killed, its workers
are sent SIGTERM by the kernel."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

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


# Restarting a worker that keeps dying: the first restart after RESTART_FIRST_SECONDS, each next one twice as
# late, at most RESTART_MAX_SECONDS; a worker that lived STEADY_SECONDS starts the backoff over.
RESTART_FIRST_SECONDS = 0.5
RESTART_MAX_SECONDS = 30.0
STEADY_SECONDS = 60.0
POLL_SECONDS = 0.1
log = logging.getLogger("gateway.workers")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


SUPERVISOR_ENV = "MCP_GATEWAY_SUPERVISOR"  # a worker's parent's pid, set by the supervisor


def die_with_parent(env: Mapping[str, str]) -> None:
    """Called by each worker as it starts: SIGTERM to it when the supervisor dies, even by SIGKILL (Linux's
    PR_SET_PDEATHSIG), so no orphaned worker keeps serving the port unsupervised; elsewhere nothing. A supervisor
    already gone by then (the signal would never come) ends the worker at once."""
    supervisor = env.get(SUPERVISOR_ENV, "")
    if not supervisor.isdigit():
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(supervisor):
        raise SystemExit("gateway: the supervising process is gone; not serving")


@dataclass
class Worker:
    """One worker's place: its current process, when it started, how many times it was started, and when the
    next start is due while it is down."""

    number: int
    proc: subprocess.Popen[bytes]
    started: float
    starts: int = 1
    delay: float = RESTART_FIRST_SECONDS
    due: float | None = None


def ending(code: int) -> str:
    """How a process ended, as the log says it: ``killed by SIGKILL`` or ``exited with status 3``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exited with status {code}"


class Supervisor:
    """The workers of one ``serve --workers N``; :meth:`run` returns the parent's exit status."""

    def __init__(self, command: list[str], workers: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.command, self.clock = command, clock
        self.stopping: int | None = None  # the signal that asked to stop
        self.pending: list[int] = []  # signals received, not yet passed on
        self.workers = [Worker(n, self.start(), clock()) for n in range(1, workers + 1)]
        log.info("supervising %d workers (pids %s)", workers, ", ".join(str(w.proc.pid) for w in self.workers))

    def start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.command, env={**os.environ, SUPERVISOR_ENV: str(os.getpid())})

    def signalled(self, signum: int, _frame: object) -> None:
        """Only noted here (a handler interrupts the loop anywhere); :meth:`run` passes it on."""
        self.pending.append(signum)

    def run(self) -> int:
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        before = {signum: signal.signal(signum, self.signalled) for signum in handled}
        try:
            return self.supervise()
        finally:
            for signum, handler in before.items():
                signal.signal(signum, handler)

    def supervise(self) -> int:
        while True:
            while self.pending:
                self.forward(self.pending.pop(0))
            if self.stopping is not None:
                return self.stop_all()
            for worker in self.workers:
                refused = self.tend(worker)
                if refused is not None:
                    self.stopping = signal.SIGTERM
                    self.forward(signal.SIGTERM)
                    return self.stop_all()
            time.sleep(POLL_SECONDS)

    def forward(self, signum: int) -> None:
        """SIGHUP to every running worker; SIGTERM or SIGINT too, and no worker is started again."""
        running = [w for w in self.workers if w.due is None and w.proc.poll() is None]
        if signum != signal.SIGHUP and self.stopping is None:
            self.stopping = signum
            log.info("stopping %d workers (%s)", len(running), signal.Signals(signum).name)
        for worker in running:
            worker.proc.send_signal(signum)

    def tend(self, worker: Worker) -> int | None:
        """Start a worker whose restart is due; notice one that ended. A start-up refusal: its status."""
        now = self.clock()
        if worker.due is not None:
            if now >= worker.due:
                worker.proc, worker.started, worker.due = self.start(), now, None
                worker.starts += 1
                log.info("worker %d restarted (pid %d)", worker.number, worker.proc.pid)
            return None
        code = worker.proc.poll()
        if code is None or self.stopping is not None:
            return None
        lived = now - worker.started
        if worker.starts == 1 and code > 0 and lived < STEADY_SECONDS:
            log.error("worker %d (pid %d) %s at start-up: stopping the service", worker.number, worker.proc.pid,
                      ending(code))
            return code
        if lived >= STEADY_SECONDS:
            worker.delay = RESTART_FIRST_SECONDS
        log.warning("worker %d (pid %d) %s after %.1f s; restarting it in %g s", worker.number, worker.proc.pid,
                    ending(code), lived, worker.delay)
        worker.due = now + worker.delay
        worker.delay = min(worker.delay * 2, RESTART_MAX_SECONDS)
        return None

    def stop_all(self) -> int:
        """Wait for every worker to end; the first non-zero status (128 + N for a worker killed by signal N)."""
        codes = [w.proc.wait() for w in self.workers if w.due is None]
        log.info("workers stopped")
        failed = next((code for code in codes if code), 0)
        return 128 - failed if failed < 0 else failed


def supervise(argv: Sequence[str], workers: int) -> int:
    return Supervisor([sys.executable, "-m", "gateway", "serve", *worker_argv(argv)], workers).run()
