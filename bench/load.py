"""``python -m bench.load [--sessions 200] [--duration 60] [--upstream URL] [--replicas 3]``: the load check.

N concurrent legacy sessions each run bridged ``summarize_repo`` calls (two sampling rounds each) back to back
for the duration, through a gateway started here (in front of the reference core started here, or of
``--upstream``), every child with its databases in a temporary directory. Each call's summary answer carries a
nonce its final result must echo, so a result meant for another call or session counts as cross-wired, not as
a success. Prints p50/p99 latency, calls, errors, lost, cross-wired and the gateway's RSS before and after;
exits 1 when any call errored, was lost or cross-wired. Not a benchmark of speed (that is ``bench``).

With ``--replicas N`` the same load then runs through HAProxy (``config/haproxy.example.cfg``, plain round robin,
``bench.balancer``) in front of N gateways on Redis (``--redis``, as ``bench`` finds it), one of them killed with
SIGKILL every ``--kill-every`` seconds and restarted on its port, and its figures are printed beside the single
gateway's. There the client does what the design leaves to a client whose replica died
(docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): it resumes a broken stream with
``Last-Event-ID``, and sends again an answer whose POST broke or got a 5xx, and a request whose POST broke before its
first event (under a new id); a call is lost only when none of that brought its answer within :data:`CALL_DEADLINE`.
How often each was needed is printed."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.balancer import REPLICAS, BalancedGateways, haproxy_binary
from bench.clients import PICK, LegacyClient
from bench.procs import Child
from bench.redis_side import resolve_url

CALL_DEADLINE = 60.0  # a call with no answer after this long is lost (nothing in the path waits that long)
AGAIN_SECONDS = 0.05  # before a request is sent again (its POST broke or got a 5xx)
_nonces = itertools.count()


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    calls: int = 0
    errors: int = 0
    lost: int = 0
    crossed: int = 0
    examples: list[str] = field(default_factory=list)  # the first few problems, for the report
    # What a client whose replica died did (--replicas only; a single gateway's run recovers nothing).
    resumed: int = 0  # streams resumed with Last-Event-ID (each GET sent)
    resent_requests: int = 0  # calls sent again under a new id: their POST broke before its first event
    resent_answers: int = 0  # answers sent again: their POST broke or got a 5xx

    def problem(self, kind: str, text: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.examples) < 5:
            self.examples.append(f"{kind}: {text[:300]}")


class Broken(ConnectionError):
    """A 5xx, or a stream that ended without the call's response: sent again or resumed (when recovering)."""


BROKEN = (aiohttp.ClientError, ConnectionError, asyncio.IncompleteReadError)


class NonceClient(LegacyClient):
    """The benchmark's legacy client, answering the summary round with a per-call nonce; with ``recover``, it also
    recovers from a replica that died as the module docstring says (else any break loses the call)."""

    def __init__(self, http: aiohttp.ClientSession, url: str, tally: Tally, recover: bool = False) -> None:
        super().__init__(http, url)
        self.tally, self.recover = tally, recover

    async def summarize(self, nonce: str) -> dict[str, Any]:
        while True:
            self.next_id += 1
            ident = self.next_id
            seen: list[str] = []  # the ids of the events read on the call's stream
            message = {"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                       "params": {"name": "summarize_repo", "arguments": {"repo": nonce}}}
            try:
                async with await self._post(message) as resp:
                    return await self._answered(resp, ident, nonce, seen)
            except BROKEN:
                if not self.recover:
                    raise
            if seen:
                return await self._resume(ident, nonce, seen)
            self.tally.resent_requests += 1
            await asyncio.sleep(AGAIN_SECONDS)

    async def _answered(self, resp: aiohttp.ClientResponse, ident: int, nonce: str,
                        seen: list[str]) -> dict[str, Any]:
        if resp.status >= 500:
            raise Broken(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        if resp.content_type == "application/json":
            return dict(json.loads(await resp.read()))
        return await self._read(resp, ident, nonce, seen)

    async def _read(self, resp: aiohttp.ClientResponse, ident: int, nonce: str, seen: list[str]) -> dict[str, Any]:
        """Events until the call's response, answering each sampling request on the way."""
        async for event_id, message in _events(resp):
            if event_id:
                seen.append(event_id)
            if message is None:
                continue
            if message.get("id") == ident and ("result" in message or "error" in message):
                return message
            if message.get("method") == "sampling/createMessage":
                await self._answer(message, nonce)
        raise Broken("the SSE stream ended without a response")

    async def _answer(self, request: dict[str, Any], nonce: str) -> None:
        body = {"jsonrpc": "2.0", "id": request["id"], "result": _answer(request["params"], nonce)}
        while True:
            try:
                async with await self._post(body) as posted:
                    await posted.read()
                    if posted.status < 500:
                        return
                    raise Broken(f"answer: HTTP {posted.status}")
            except BROKEN:
                if not self.recover:
                    raise
            self.tally.resent_answers += 1
            await asyncio.sleep(AGAIN_SECONDS)

    async def _resume(self, ident: int, nonce: str, seen: list[str]) -> dict[str, Any]:
        """The call's stream again after the last event read (2025-11-25 basic/transports §Resumability), on
        whichever replica the balancer picks, until its response."""
        while True:
            self.tally.resumed += 1
            headers = {**self._headers(), "Accept": "text/event-stream", "Last-Event-ID": seen[-1]}
            try:
                async with self.http.get(self.url, headers=headers) as resp:
                    if resp.status == 200:
                        return await self._read(resp, ident, nonce, seen)
                    if resp.status < 500:
                        raise RuntimeError(f"resume refused: HTTP {resp.status}: {(await resp.text())[:200]}")
            except BROKEN:
                pass
            await asyncio.sleep(AGAIN_SECONDS)


async def _events(resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[str | None, dict[str, Any] | None]]:
    """(event id, message) of each SSE event; the message is None for one without data (a priming event)."""
    event_id: str | None = None
    data: list[bytes] = []
    async for raw in resp.content:
        line = raw.rstrip(b"\r\n")
        if line.startswith(b"id:"):
            event_id = line[3:].strip().decode()
        elif line.startswith(b"data:"):
            data.append(line[5:].strip())
        elif not line and (data or event_id is not None):
            payload = b"\n".join(data)
            yield event_id, json.loads(payload) if payload else None
            event_id, data = None, []


def _answer(params: dict[str, Any], nonce: str) -> dict[str, Any]:
    prompt = params["messages"][0]["content"]["text"]
    text = PICK if "JSON array" in prompt else f"Summary {nonce}."
    return {"role": "assistant", "content": {"type": "text", "text": text}, "model": "load", "stopReason": "endTurn"}


def judge(tally: Tally, message: dict[str, Any], nonce: str) -> None:
    """A result whose summary is not this call's is cross-wired; an error (or isError) is an error."""
    result = message.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        tally.problem("errors", json.dumps(message.get("error") or result))
        return
    summary = (result.get("structuredContent") or {}).get("summary")
    if summary != f"Summary {nonce}.":
        tally.problem("crossed", f"call {nonce} got summary {summary!r}")


async def session(client: NonceClient, stop_at: float, tally: Tally) -> None:
    while (began := time.perf_counter()) < stop_at:
        nonce = f"c{next(_nonces)}"
        tally.calls += 1
        try:
            async with asyncio.timeout(CALL_DEADLINE):
                message = await client.summarize(nonce)
        except (TimeoutError, *BROKEN, RuntimeError, ValueError) as exc:
            tally.problem("lost", f"call {nonce}: {type(exc).__name__}: {exc}")
            continue
        tally.latencies.append(time.perf_counter() - began)
        judge(tally, message, nonce)


async def start_sessions(http: aiohttp.ClientSession, url: str, count: int, tally: Tally,
                         recover: bool = False) -> list[NonceClient]:
    clients = [NonceClient(http, url, tally, recover) for _ in range(count)]
    for batch in range(0, count, 50):  # initialize in batches: 200 at once would only measure the accept queue
        await asyncio.gather(*(c.start() for c in clients[batch:batch + 50]))
    return clients


def _http() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None))


async def drive(url: str, sessions: int, duration: float, gateway: Child) -> tuple[Tally, int, int]:
    """(tally, RSS before, RSS after): sessions are opened first, so 'before' already holds them."""
    tally = Tally()
    async with _http() as http:
        clients = await start_sessions(http, url, sessions, tally)
        before = gateway.rss_bytes()
        stop_at = time.perf_counter() + duration
        await asyncio.gather(*(session(c, stop_at, tally) for c in clients))
        return tally, before, gateway.rss_bytes()


async def drive_replicas(balanced: BalancedGateways, args: argparse.Namespace,
                         tails: list[deque[bytes]]) -> tuple[Tally, int]:
    """(tally, replicas killed): the load through the balancer while :func:`kill_every` kills and restarts."""
    tally = Tally()
    async with _http() as http:
        clients = await start_sessions(http, balanced.front_url, args.sessions, tally, recover=True)
        began = time.perf_counter()
        killer = asyncio.create_task(kill_every(balanced, args.kill_every, began, began + args.duration, tails))
        try:
            await asyncio.gather(*(session(c, began + args.duration, tally) for c in clients))
        finally:
            kills = await killer
        return tally, kills


async def kill_every(balanced: BalancedGateways, every: float, began: float, stop_at: float,
                     tails: list[deque[bytes]]) -> int:
    """Every ``every`` seconds until ``stop_at``, the next replica in turn SIGKILLed and a new process started on
    its port (in threads: the clients' loop runs on meanwhile); how many were killed."""
    kills = 0
    while (at := began + every * (kills + 1)) < stop_at:
        await asyncio.sleep(at - time.perf_counter())
        n = kills % len(balanced.replicas)
        await asyncio.to_thread(balanced.kill, n)
        tails.append(drain_stderr(await asyncio.to_thread(balanced.restart, n)))
        kills += 1
    return kills


def drain_stderr(child: Child) -> deque[bytes]:
    """A child's last stderr lines, for the report (Child reads its stderr in a thread, so a gateway logging
    every failed call under load never fills the pipe and stalls)."""
    return child.tail


def start_core(args: argparse.Namespace, tmp: Path) -> tuple[Child | None, str]:
    """The reference core (unless --upstream), its database in ``tmp``; and the upstream URL."""
    if args.upstream is not None:
        return None, args.upstream
    (tmp / "core.toml").write_text(f'database = "{tmp / "core.sqlite3"}"\n')
    core = Child("core", ["-m", "modern_server", "--port", "{port}", "--no-access-log", "--config",
                          str(tmp / "core.toml")])
    return core, core.url


@dataclass
class Run:
    """One run's outcome: its tally, the last lines of its gateways' stderr, and (one gateway) its RSS or
    (replicas) how many were killed."""

    tally: Tally
    tails: list[deque[bytes]]
    rss: tuple[int, int] = (0, 0)
    kills: int = 0

    def failed(self) -> bool:
        return bool(self.tally.errors or self.tally.lost or self.tally.crossed)


def run_single(args: argparse.Namespace, upstream: str, tmp: Path) -> Run:
    gateway = Child("gateway", ["-m", "gateway", "serve", "--port", "{port}", "--upstream", upstream,
                                "--no-access-log", "--usage-db", str(tmp / "gateway-usage.sqlite3")])
    tails = [drain_stderr(gateway)]
    try:
        tally, before, after = asyncio.run(drive(gateway.url, args.sessions, args.duration, gateway))
    finally:
        gateway.stop()
    return Run(tally, tails, rss=(before, after))


def run_replicas(args: argparse.Namespace, upstream: str) -> Run:
    url, binary = resolve_url(args.redis), haproxy_binary()
    if url is None or binary is None:
        raise SystemExit(f"--replicas needs a Redis (--redis; found {url}) and haproxy (found {binary})")
    balanced = BalancedGateways(binary, url, upstream, [])
    tails = [drain_stderr(replica) for replica in balanced.replicas]
    try:
        tally, kills = asyncio.run(drive_replicas(balanced, args, tails))
    finally:
        balanced.stop()
    return Run(tally, tails, kills=kills)


def _percentiles(tally: Tally) -> str:
    lat = sorted(tally.latencies) or [0.0]
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return f"p50 {statistics.median(lat) * 1e3:.1f} p99 {p99 * 1e3:.1f}"


def _counts(tally: Tally) -> str:
    return f"calls {tally.calls} errors {tally.errors} lost {tally.lost} cross-wired {tally.crossed}"


def report(args: argparse.Namespace, single: Run, replicas: Run | None) -> None:
    tally, (before, after) = single.tally, single.rss
    print(f"load: sessions {args.sessions} duration {args.duration:g} s {_counts(tally)}")
    print(f"latency ms: {_percentiles(tally)}")
    print(f"gateway RSS MiB: before {before / 2**20:.1f} after {after / 2**20:.1f}")
    for line in tally.examples:
        print(f"  {line}")
    if replicas is None:
        return
    tally = replicas.tally
    print(f"replicas: {REPLICAS} gateways on Redis behind haproxy, one SIGKILLed every {args.kill_every:g} s and "
          f"restarted ({replicas.kills} killed): {_counts(tally)}")
    print(f"replicas latency ms: {_percentiles(tally)} (one gateway: {_percentiles(single.tally)})")
    print(f"replicas recovered: streams resumed {tally.resumed} calls sent again {tally.resent_requests} "
          f"answers sent again {tally.resent_answers}")
    for line in tally.examples:
        print(f"  {line}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[1])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--upstream", default=None, help="2026-07-28 server (default: start the reference core)")
    parser.add_argument("--replicas", type=int, choices=(0, REPLICAS), default=0,
                        help="then the same load through haproxy in front of this many gateways on Redis")
    parser.add_argument("--kill-every", type=float, default=15.0, help="seconds between two replicas killed")
    parser.add_argument("--redis", default=None, metavar="URL",
                        help="the replicas' Redis (default: REDIS_URL, else redis://127.0.0.1:6379/0)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gateway-load-") as tmp:
        core, upstream = start_core(args, Path(tmp))
        try:
            single = run_single(args, upstream, Path(tmp))
            replicas = run_replicas(args, upstream) if args.replicas else None
        finally:
            if core is not None:
                core.stop()
    report(args, single, replicas)
    failed = [run for run in (single, replicas) if run is not None and run.failed()]
    for run in failed:
        sys.stderr.write(b"".join(line for tail in run.tails for line in tail).decode(errors="replace"))
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
