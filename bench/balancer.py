"""Replicas behind a balancer in the same run (docs/benchmarks.md "Replicas behind a balancer"): three gateways on
the Redis store behind ``haproxy`` running ``config/haproxy.example.cfg`` (plain round robin, only its ports
changed), so consecutive requests of one session, a bridged round's answer included, land on different replicas;
and the Redis round trips of a two-round bridged call, counted.

The balanced scenarios need ``haproxy`` (``apt-get install haproxy``) and a Redis; without either they are left out.
The count needs only a Redis: :class:`CountingProxy` sits between a gateway and Redis and counts what the gateway
writes, one write per round trip (the store's pipelined connection writes a command, or the commands issued
meanwhile, and waits for the reply, docs/design/replicas.md#one-pipelined-redis-connection-per-process).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from bench.clients import LegacyClient
from bench.procs import Child, _cpu_times, free_port, scratch_usage_db, summed_times
from bench.redis_side import delete_keys, store_args

EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "haproxy.example.cfg"
ADDRESS = re.compile(r"(?m)^(\s*(?:bind|server\s+\S+)\s+)127\.0\.0\.1:(\d+)")  # the frontend's, then the servers'
REPLICAS = 3
# Scenario on the balanced replicas -> the scenario it is compared with (one gateway on Redis, or in memory).
BALANCED_SCENARIOS = {"translated_rr": "translated_redis", "bridged_rr": "bridged_redis",
                      "bridged_one_rr": "bridged_one"}
# One gateway behind the same balancer (every server line of the example on it): what the balancer's hop costs
# by itself, so an _rr scenario's ratio splits into that hop and the spreading over replicas. Reported, not judged.
# The kind of call -> its scenario there.
LB1_SCENARIOS = {"translated": "translated_lb1", "bridged": "bridged_lb1"}
# The floor of the same spreading: three bare forwarders (bench.forwarder) behind the same balancer, against one
# forwarder directly, what any Python proxy pays on this host for three processes and the hop. A floor scenario ->
# the scenario it is compared with; then a balanced gateway scenario -> the floor of its kind of call.
FLOOR_SCENARIOS = {"forwarder_rr": "forwarder", "mrtr_forwarder_rr": "mrtr_forwarder"}
FLOOR_OF = {"translated_rr": "forwarder_rr", "bridged_rr": "mrtr_forwarder_rr"}
TRIP_CALLS = 15  # two-round calls counted; the median per call is reported (a periodic sweep may fall in one)


def haproxy_binary() -> str | None:
    found = shutil.which("haproxy")
    return found or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)


def haproxy_config(frontend: int, replicas: list[int]) -> str:
    """The example configuration with its addresses moved to these ports (in order: frontend, then servers)."""
    ports = iter([frontend, *replicas])
    return ADDRESS.sub(lambda m: f"{m[1]}127.0.0.1:{next(ports)}", EXAMPLE.read_text())


def start_haproxy(binary: str, frontend: int, servers: list[int]) -> subprocess.Popen[bytes]:
    """``haproxy`` running the example configuration on these ports, once its frontend listens."""
    config = os.path.join(tempfile.mkdtemp(prefix="gateway-bench-haproxy-"), "haproxy.cfg")
    Path(config).write_text(haproxy_config(frontend, servers))
    proc = subprocess.Popen([binary, "-db", "-f", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_port(frontend, proc)
    except BaseException:
        proc.terminate()
        proc.wait(timeout=10)
        raise
    return proc


def stop_behind(haproxy: subprocess.Popen[bytes] | None, processes: list[Child]) -> None:
    """Stop the balancer first (nothing new reaches the processes), then every process behind it."""
    if haproxy is not None:
        haproxy.terminate()
        haproxy.wait(timeout=10)
    for process in processes:
        process.stop()


class BalancedGateways:
    """Three gateways on one Redis prefix behind ``haproxy`` (started at once, stopped by :meth:`stop`). Their CPU
    (:meth:`cpu_times`) is the three gateways', not the balancer's: what the gateway costs across replicas."""

    def __init__(self, binary: str, url: str, upstream: str, extra: list[str]) -> None:
        self.url, self.prefix = url, f"bench-rr-{os.urandom(4).hex()}:"
        self._args = ["-m", "gateway", "serve", "--port", "{port}", "--upstream", upstream, "--no-access-log",
                      *store_args(url, self.prefix), *extra]
        self.replicas: list[Child] = []
        self.killed: list[Child] = []  # replicas killed and replaced (bench.load)
        self.haproxy: subprocess.Popen[bytes] | None = None
        try:
            for n in range(REPLICAS):
                self.replicas.append(self._start(n))
            self.port = free_port()
            self.haproxy = start_haproxy(binary, self.port, [r.port for r in self.replicas])
        except BaseException:
            self.stop()
            raise
        self.front_url = f"http://127.0.0.1:{self.port}/mcp"

    def _start(self, n: int, port: int | None = None) -> Child:
        return Child(f"gateway-rr{n}", [*self._args, "--usage-db", scratch_usage_db()], port=port)

    def kill(self, n: int) -> None:
        """SIGKILL replica ``n``: nothing of it runs on (no handover), its leases lapse where they are."""
        replica = self.replicas[n]
        replica.proc.kill()
        replica.proc.wait()
        self.killed.append(replica)

    def restart(self, n: int) -> Child:
        """A new process in replica ``n``'s place, on its port (where the balancer sends), once it listens."""
        self.replicas[n] = self._start(n, self.replicas[n].port)
        return self.replicas[n]

    def cpu_times(self) -> tuple[float, float]:
        return summed_times(replica.cpu_times() for replica in self.replicas)

    def balancer_cpu_seconds(self) -> float:
        return sum(_cpu_times(self.haproxy.pid)) if self.haproxy is not None else 0.0

    def stop(self) -> None:
        stop_behind(self.haproxy, self.replicas)
        delete_keys(self.url, self.prefix)


class OneBehind:
    """``haproxy`` running the example configuration with every server line on one gateway's port: the same hop as
    the replicas' balancer, in front of one process."""

    def __init__(self, binary: str, gateway_port: int) -> None:
        self.port = free_port()
        self.haproxy = start_haproxy(binary, self.port, [gateway_port] * REPLICAS)
        self.front_url = f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        stop_behind(self.haproxy, [])


class BalancedForwarders:
    """Three bare forwarders in front of ``upstream`` behind ``haproxy`` running the example configuration: the
    spreading's floor. Their CPU (:meth:`cpu_times`) is the three forwarders', as the replicas' is theirs."""

    def __init__(self, binary: str, upstream: str, extra: list[str]) -> None:
        self.forwarders: list[Child] = []
        self.haproxy: subprocess.Popen[bytes] | None = None
        try:
            for n in range(REPLICAS):
                self.forwarders.append(Child(f"forwarder-rr{n}", ["-m", "bench.forwarder", "--port", "{port}",
                                                                  "--upstream", upstream, *extra]))
            self.port = free_port()
            self.haproxy = start_haproxy(binary, self.port, [f.port for f in self.forwarders])
        except BaseException:
            self.stop()
            raise
        self.front_url = f"http://127.0.0.1:{self.port}/mcp"

    def cpu_times(self) -> tuple[float, float]:
        return summed_times(forwarder.cpu_times() for forwarder in self.forwarders)

    def stop(self) -> None:
        stop_behind(self.haproxy, self.forwarders)


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    import socket
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"haproxy exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("haproxy did not start listening")


class CountingProxy:
    """A TCP proxy in front of Redis, in a thread of its own (a gateway connects to Redis while the benchmark's
    loop waits for it to listen), counting every chunk a client writes to Redis: :attr:`writes`."""

    def __init__(self, redis_url: str) -> None:
        parts = urlsplit(redis_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.port, self.writes = free_port(), 0
        netloc = parts.netloc.rsplit("@", 1)
        self.url = urlunsplit(parts._replace(netloc=(netloc[0] + "@" if len(netloc) == 2 else "")
                                             + f"127.0.0.1:{self.port}"))
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        self._ready.wait(10)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, counted: bool) -> None:
            try:
                while data := await source.read(1 << 16):
                    self.writes += counted
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                sink.close()
        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


class _Answering(LegacyClient):
    """A legacy session whose answers to the gateway's requests are posted to ``answer_url`` (another replica)."""

    def __init__(self, http: aiohttp.ClientSession, url: str, answer_url: str) -> None:
        super().__init__(http, url)
        self.answer_url = answer_url

    async def _post(self, message: dict[str, Any]) -> aiohttp.ClientResponse:
        if "method" in message or "id" not in message:
            return await super()._post(message)
        return await self.http.post(self.answer_url, data=json.dumps(message), headers=self._headers())


async def store_trips(http: aiohttp.ClientSession, redis_url: str, upstream: str, extra: list[str]) -> dict[str, Any]:
    """Redis round trips per two-round bridged call (``summarize_repo``), the median over :data:`TRIP_CALLS` calls
    each: with the answers posted to the replica running the call, and to another replica (relayed,
    docs/design/replicas.md#replicas-relay-through-the-store). Two gateways on one prefix, through
    :class:`CountingProxy`."""
    proxy, prefix = CountingProxy(redis_url), f"bench-trips-{os.urandom(4).hex()}:"
    replicas: list[Child] = []
    try:
        for n in range(2):
            replicas.append(Child(f"gateway-trips{n}", [
                "-m", "gateway", "serve", "--port", "{port}", "--upstream", upstream, "--no-access-log",
                *store_args(proxy.url, prefix), *extra, "--usage-db", scratch_usage_db()]))
        out = {}
        for name, answer_at in (("one replica", replicas[0]), ("answers on another replica", replicas[1])):
            client = _Answering(http, replicas[0].url, answer_at.url)
            await client.start()
            counts = []
            for _ in range(TRIP_CALLS + 1):
                before = proxy.writes
                if not await client.call("summarize_repo", {"repo": "bench"}):
                    raise RuntimeError("summarize_repo through the counted gateways failed")
                counts.append(proxy.writes - before)
            out[name] = statistics.median(counts[1:])  # the first call also loads the scripts (EVAL)
        return out
    finally:
        for replica in replicas:
            replica.stop()
        proxy.stop()
        delete_keys(redis_url, prefix)


def balanced_ratios(at: dict[tuple[str, int], Any], conc: int) -> dict[str, Any]:
    """The balanced replicas against one gateway at ``conc``: median latency and the gateways' CPU per request."""
    out: dict[str, Any] = {}
    for name, against in BALANCED_SCENARIOS.items():
        if (name, conc) not in at or (against, conc) not in at:
            continue
        ours, theirs = at[(name, conc)], at[(against, conc)]
        key = f"{name}/{against}"
        out[f"{key} p50"] = round(ours.p50_ms / theirs.p50_ms, 3)
        cpu = (ours.front_cpu_us_per_request, theirs.front_cpu_us_per_request)
        out[f"{key} cpu"] = round(cpu[0] / cpu[1], 3) if cpu[0] and cpu[1] else None
    return out | _split_of_rr(at, conc) | _floor_ratios(at, conc)


def _split_of_rr(at: dict[tuple[str, int], Any], conc: int) -> dict[str, Any]:
    """``{kind}_rr / {kind}_redis`` as the balancer's hop (one gateway behind it, against the same gateway
    directly) times the spreading over three replicas (the replicas against that one gateway, both behind it)."""
    out: dict[str, Any] = {}
    for kind, lb1 in LB1_SCENARIOS.items():
        names = (lb1, f"{kind}_redis", f"{kind}_rr")
        if any((name, conc) not in at for name in names):
            continue
        one, direct, spread = (at[(name, conc)] for name in names)
        cpu = (spread.front_cpu_us_per_request, one.front_cpu_us_per_request)
        out |= {f"{lb1}/{kind}_redis p50": round(one.p50_ms / direct.p50_ms, 3),
                f"{kind}_rr/{lb1} p50": round(spread.p50_ms / one.p50_ms, 3),
                f"{kind}_rr/{lb1} cpu": round(cpu[0] / cpu[1], 3) if cpu[0] and cpu[1] else None}
    return out


def _floor_ratios(at: dict[tuple[str, int], Any], conc: int) -> dict[str, Any]:
    """The spreading's floor (three bare forwarders behind the balancer against one directly) and each balanced
    gateway ratio over the floor of its kind of call: the part of ``{kind}_rr / {kind}_redis`` that the gateway's
    replicas add to what three bare Python proxies behind the same balancer cost."""
    out: dict[str, Any] = {}
    for name, against in FLOOR_SCENARIOS.items():
        if (name, conc) in at and (against, conc) in at:
            ours, theirs = at[(name, conc)], at[(against, conc)]
            cpu = (ours.front_cpu_us_per_request, theirs.front_cpu_us_per_request)
            out |= {f"{name}/{against} p50": round(ours.p50_ms / theirs.p50_ms, 3),
                    f"{name}/{against} cpu": round(cpu[0] / cpu[1], 3) if cpu[0] and cpu[1] else None}
    for name, floor in FLOOR_OF.items():
        against, floor_key = BALANCED_SCENARIOS[name], f"{floor}/{FLOOR_SCENARIOS[floor]} p50"
        if (name, conc) in at and (against, conc) in at and floor_key in out:
            ratio = at[(name, conc)].p50_ms / at[(against, conc)].p50_ms
            out[f"{name}/{against} over its floor"] = round(ratio / out[floor_key], 3)
    return out
