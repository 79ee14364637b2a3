"""``python -m bench.load [--sessions 200] [--duration 60] [--upstream URL]``: the load check.

N concurrent legacy sessions each run bridged ``summarize_repo`` calls (two sampling rounds each) back to back
for the duration, through a gateway started here (in front of the reference core started here, or of
``--upstream``), every child with its databases in a temporary directory. Each call's summary answer carries a
nonce its final result must echo, so a result meant for another call or session counts as cross-wired, not as
a success. Prints p50/p99 latency, calls, errors, lost, cross-wired and the gateway's RSS before and after;
exits 1 when any call errored, was lost or cross-wired. Not a benchmark of speed (that is ``bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.clients import PICK, LegacyClient
from bench.procs import Child

CALL_DEADLINE = 60.0  # a call with no answer after this long is lost (nothing in the path waits that long)
_nonces = itertools.count()


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    calls: int = 0
    errors: int = 0
    lost: int = 0
    crossed: int = 0
    examples: list[str] = field(default_factory=list)  # the first few problems, for the report

    def problem(self, kind: str, text: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.examples) < 5:
            self.examples.append(f"{kind}: {text[:300]}")


class NonceClient(LegacyClient):
    """The benchmark's legacy client, answering the summary round with a per-call nonce."""

    async def summarize(self, nonce: str) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        message = {"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                   "params": {"name": "summarize_repo", "arguments": {"repo": nonce}}}
        async with await self._post(message) as resp:
            if resp.status != 200:
                raise ConnectionError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
            if resp.content_type == "application/json":
                return json.loads(await resp.read())
            return await self._drain(resp, ident, lambda params: _answer(params, nonce))


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
        except (TimeoutError, aiohttp.ClientError, ConnectionError, RuntimeError, ValueError) as exc:
            tally.problem("lost", f"call {nonce}: {type(exc).__name__}: {exc}")
            continue
        tally.latencies.append(time.perf_counter() - began)
        judge(tally, message, nonce)


async def start_sessions(http: aiohttp.ClientSession, url: str, count: int) -> list[NonceClient]:
    clients = [NonceClient(http, url) for _ in range(count)]
    for batch in range(0, count, 50):  # initialize in batches: 200 at once would only measure the accept queue
        await asyncio.gather(*(c.start() for c in clients[batch:batch + 50]))
    return clients


async def drive(url: str, sessions: int, duration: float, gateway: Child) -> tuple[Tally, int, int]:
    """(tally, RSS before, RSS after): sessions are opened first, so 'before' already holds them."""
    tally = Tally()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=None)) as http:
        clients = await start_sessions(http, url, sessions)
        before = gateway.rss_bytes()
        stop_at = time.perf_counter() + duration
        await asyncio.gather(*(session(c, stop_at, tally) for c in clients))
        return tally, before, gateway.rss_bytes()


def drain_stderr(child: Child) -> deque[bytes]:
    """Read a child's stderr in a thread: Child pipes it, and a gateway logging every failed call under load
    would otherwise fill the pipe and stall. The last lines are kept for the report."""
    tail: deque[bytes] = deque(maxlen=40)
    threading.Thread(target=lambda: tail.extend(child.stderr), daemon=True).start()
    return tail


def start(args: argparse.Namespace, tmp: Path) -> list[Child]:
    """[core (unless --upstream), gateway]; every database in ``tmp``."""
    children: list[Child] = []
    upstream = args.upstream
    if upstream is None:
        (tmp / "core.toml").write_text(f'database = "{tmp / "core.sqlite3"}"\n')
        children.append(Child("core", ["-m", "modern_server", "--port", "{port}", "--no-access-log",
                                       "--config", str(tmp / "core.toml")]))
        upstream = children[0].url
    children.append(Child("gateway", ["-m", "gateway", "serve", "--port", "{port}", "--upstream", upstream,
                                      "--no-access-log", "--usage-db", str(tmp / "gateway-usage.sqlite3")]))
    return children


def report(args: argparse.Namespace, tally: Tally, before: int, after: int) -> None:
    lat = sorted(tally.latencies) or [0.0]
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"load: sessions {args.sessions} duration {args.duration:g} s calls {tally.calls} errors {tally.errors} "
          f"lost {tally.lost} cross-wired {tally.crossed}")
    print(f"latency ms: p50 {statistics.median(lat) * 1e3:.1f} p99 {p99 * 1e3:.1f}")
    print(f"gateway RSS MiB: before {before / 2**20:.1f} after {after / 2**20:.1f}")
    for line in tally.examples:
        print(f"  {line}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[1])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--upstream", default=None, help="2026-07-28 server (default: start the reference core)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gateway-load-") as tmp:
        children = start(args, Path(tmp))
        tails = [drain_stderr(c) for c in children]
        try:
            tally, before, after = asyncio.run(drive(children[-1].url, args.sessions, args.duration, children[-1]))
        finally:
            for child in children:
                child.stop()
        report(args, tally, before, after)
        if tally.errors or tally.lost or tally.crossed:
            sys.stderr.write(b"".join(tails[-1]).decode(errors="replace"))
            raise SystemExit(1)


if __name__ == "__main__":
    main()
