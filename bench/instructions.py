"""``python -m bench.instructions [--scenario translated] [--requests 300] [--concurrency 1] [--tree DIR]
[--gc-gen0 N] [--store redis://HOST:PORT/DB]``: the gateway's user-space instructions per request, counted by
valgrind's callgrind. ``--scenario round`` counts a translated and a two-round bridged call and judges a round's
instructions against a call's (at most 1.10 times; exit status 1 when over); ``--scenario auth`` an authenticated
translated call against an unauthenticated one (at most 1.05 times). ``--scenario reverse_bridged`` counts
bench.reverse's bridged call (a 2026 client, a 2025-only server of the official 1.x SDK behind the reverse bridge; its
two requests are one call): it needs that SDK's venv (bench.reverse.legacy_python), and says how to make one without.

Timings on a shared VM drift by tens of percent between runs; an instruction count does not (the same count to
about 0.5% run after run, whatever else the machine is doing), so a change worth 2% shows plainly. It counts
only the gateway process, only after a warm-up, and only user space: system calls and cache misses are not in
it, so it ranks changes to the gateway's own Python and never replaces the timed benchmark.

The gateway runs under ``valgrind --tool=callgrind`` with instrumentation off until the warm-up (a fifth of the
requests, at least 20) is done; ``callgrind_control`` then zeroes the counters, the measured requests run from
this process, one at a time or from ``--concurrency`` clients at once (each with a session of its own), and a
dump gives the total. At a concurrency the count says whether a request does more work when many are in flight
(the timed benchmark's CPU per request at c=32 also holds what instructions cannot show: cache misses, and the
other processes sharing the cores). The usage store's periodic flush is pushed past the
measurement (its SQLite writes run in a thread whenever the timer falls, which made counts vary by ~2%).
``--tree DIR`` runs the gateway from another checkout of this project (``git worktree add DIR REV``), so two
revisions can be compared against the same core. ``--store`` puts the gateway's sessions on that Redis (under a
prefix of its own, deleted afterwards), so the store's cost in the gateway is counted beside the memory store's.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from bench.__main__ import Op, makers
from bench.auth import PUBLIC, BearerClient, Keys
from bench.procs import Child, free_port

SCENARIOS = ("passthrough", "translated", "translated_auth", "bridged", "bridged_one", "reverse_bridged")
REVERSE = "reverse_bridged"  # bench.reverse's bridged call, through the reverse bridge to a 1.x SDK server
AUTH = "translated_auth"  # the translated call with [gateway.auth] on, each client keeping its token (bench.auth)


class _Front:
    """The gateway as the bench's clients see it (they only need its URL)."""

    def __init__(self, url: str) -> None:
        self.url = url


def _wait_listening(port: int, proc: subprocess.Popen, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds  # startup under valgrind is slow
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the gateway under valgrind exited before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the gateway under valgrind did not start listening")


def _total(out_prefix: str) -> int:
    """The largest ``summary:`` among the dumps: the one taken after the measured requests."""
    best = 0
    for path in glob.glob(out_prefix + "*"):
        with open(path) as handle:
            for line in handle:
                if line.startswith("summary:"):
                    best = max(best, int(line.split()[1]))
    return best


def _control(pid: int, option: str) -> None:
    subprocess.run(["callgrind_control", option, str(pid)], capture_output=True, check=True)


async def _drive(gateway_url: str, core: Child, scenario: str, requests: int, pid: int, concurrency: int,
                 keys: Keys | None = None) -> int:
    """The warm-up, then ``requests`` (rounded down to a multiple of ``concurrency``) counted; how many ran."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        ops = await _ops(http, gateway_url, core, scenario, concurrency, keys)

        async def run(times: int) -> None:
            await asyncio.gather(*(_repeat(op, times) for op in ops))

        _control(pid, "--instr=on")
        await run(max(20, requests // 5) // concurrency + 1)
        _control(pid, "--zero")
        each = max(1, requests // concurrency)
        await run(each)
        _control(pid, "--dump")
        return each * concurrency


async def _ops(http: aiohttp.ClientSession, url: str, core: Child, scenario: str, concurrency: int,
               keys: Keys | None) -> list[Op]:
    """One operation per client; with ``keys``, each client a subject of its own with the token it keeps."""
    if scenario == REVERSE:
        from bench.reverse import _bridged
        return [_bridged(http, url) for _ in range(concurrency)]
    if keys is None:
        front = _Front(url)
        return [await makers(http, core, front, front)[scenario]() for _ in range(concurrency)]  # type: ignore[arg-type]
    return [await _bearer_op(http, url, keys, n) for n in range(concurrency)]


async def _bearer_op(http: aiohttp.ClientSession, url: str, keys: Keys, n: int) -> Op:
    client = BearerClient(http, url, lambda: keys.token(f"instr{n}"), fresh=False)
    await client.start()

    async def op() -> None:
        if not await client.call("echo", {"text": "hi"}):
            raise RuntimeError("echo through the authenticated gateway failed")
    return op


async def _repeat(op: Callable[[], Awaitable[None]], times: int) -> None:
    for _ in range(times):
        await op()


def count(scenario: str, requests: int, tree: str, gc_gen0: int, store: str | None = None,
          concurrency: int = 1) -> float:
    """Instructions per request of the gateway run from ``tree`` for ``scenario``, with ``concurrency``
    requests in flight."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind (with callgrind_control) is needed: apt-get install valgrind")
    era: list[str] = []
    if scenario == REVERSE:  # the 1.x SDK's venv (bench.reverse.legacy_python exits with a hint without one)
        from bench.reverse import SERVER, legacy_python
        core = Child("legacy", ["-I", str(SERVER), "{port}"], python=legacy_python(None))
        era = ["--upstream-era", "2025-11-25"]
    else:
        core = Child("core", ["-m", "modern_server", "--port", "{port}", "--no-access-log"])
    port, folder = free_port(), tempfile.mkdtemp(prefix="callgrind-")
    out, config = os.path.join(folder, "gateway.out"), os.path.join(folder, "gateway.toml")
    keys = _issuer() if scenario == AUTH else None
    with open(config, "w") as handle:  # no usage flush (a thread writing SQLite) inside the measured window
        if keys is not None:
            handle.write(f'[gateway]\npublic_url = "{PUBLIC}"\n[gateway.auth]\nauthorization_servers = '
                         f'["{keys.issuer}"]\nrequired_scopes = ["mcp:tools"]\n')
        handle.write(f'[gateway.usage]\nflush_seconds = 3600\ndb = "{os.path.join(folder, "usage.sqlite3")}"\n')
        if store is not None:
            handle.write(f'[gateway.store]\nurl = "{store}"\nprefix = "{_prefix(folder)}"\n')
    env = {**os.environ, "PYTHONPATH": tree}
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                             sys.executable, "-m", "gateway", "serve", "--port", str(port), "--upstream", core.url,
                             *era, "--no-access-log", "--gc-gen0", str(gc_gen0), "--config", config],
                            cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, proc)
        ran = asyncio.run(_drive(f"http://127.0.0.1:{port}/mcp", core, scenario, requests, proc.pid, concurrency,
                                 keys))
        return _total(out) / ran
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        core.stop()
        if store is not None:
            _forget(store, _prefix(folder))
        shutil.rmtree(folder, ignore_errors=True)


def _issuer() -> Keys:
    """The authorization server's key side (bench.auth's), served from a thread of its own: the gateway fetches
    its keys during the warm-up, while this process's loop is busy driving requests."""
    keys, ready = Keys(), threading.Event()

    def serve() -> None:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(keys.start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True, name="bench-issuer").start()
    ready.wait(30)
    return keys


def _prefix(folder: str) -> str:
    return f"bench-instr-{os.path.basename(folder)}:"


def _forget(url: str, prefix: str) -> None:
    """Delete the keys the measured gateway left under its prefix (they would expire anyway)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@dataclass(frozen=True)
class Judged:
    """A ratio judged in instructions: ``translated`` and ``other`` counted one after the other, then
    ``ratio(translated, other)`` against ``target`` (docs/benchmarks.md "Targets")."""

    other: str
    what: str
    target: float
    ratio: Callable[[float, float], float]


JUDGED = {
    # A bridged round, (bridged - translated) / 2, over a translated call.
    "round": Judged("bridged", "a round / a translated call", 1.10, lambda plain, other: (other - plain) / 2 / plain),
    # bench.auth's target, where the timed ratio moves by more than the difference on a shared host and the count
    # does not. It includes the token's SHA-256 in software (valgrind runs no SHA extensions) and parsing the
    # longer request.
    "auth": Judged(AUTH, "authenticated / unauthenticated", 1.05, lambda plain, other: other / plain),
}


def judge(name: str, args: argparse.Namespace, tree: str) -> bool:
    """``--scenario round`` or ``auth``: the counts, the ratio and its verdict; True when within target."""
    judged = JUDGED[name]
    plain, other = (count(scenario, args.requests, tree, args.gc_gen0, args.store, args.concurrency)
                    for scenario in ("translated", judged.other))
    ratio = judged.ratio(plain, other)
    met = ratio <= judged.target
    print(f"translated: {plain:,.0f}, {judged.other}: {other:,.0f} instructions per request; {judged.what} "
          f"{ratio:.3f} (target <= {judged.target}: {'met' if met else 'NOT MET'})")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--scenario", choices=(*SCENARIOS, *JUDGED), default="translated",
                        help="'round': translated and bridged, and a round's ratio to a call (judged); 'auth': "
                             "translated and translated_auth, and their ratio (judged)")
    parser.add_argument("--requests", type=int, default=300, help="measured requests (after the warm-up)")
    parser.add_argument("--concurrency", type=int, default=1, help="measured requests in flight at once")
    parser.add_argument("--tree", default=os.getcwd(), help="the checkout whose gateway is measured")
    parser.add_argument("--gc-gen0", type=int, default=10_000, help="the gateway's --gc-gen0")
    parser.add_argument("--store", help="a Redis URL for the gateway's sessions (default: the memory store)")
    args = parser.parse_args()
    if args.concurrency < 1:
        parser.error("--concurrency: at least 1")
    if args.scenario in JUDGED:
        sys.exit(0 if judge(args.scenario, args, os.path.abspath(args.tree)) else 1)
    per = count(args.scenario, args.requests, os.path.abspath(args.tree), args.gc_gen0, args.store, args.concurrency)
    print(f"{args.scenario}: {per:,.0f} instructions per request (gateway from {args.tree}, "
          f"{args.requests} requests after warm-up, concurrency {args.concurrency}, store {args.store or 'memory'})")


if __name__ == "__main__":
    main()
