"""``python -m bench.store_ops [--redis URL] [--ops ping,get_session,put_round,end_round] [--calls 200,1000]``:
the gateway's user-space instructions per Redis store operation, alone in a tight loop, counted by valgrind's
callgrind.

It says what one store round trip costs the gateway apart from the request around it (docs/benchmarks.md "The
Redis store"): a bare ``PING`` over the store's pipelined connection (the asyncio floor of a round trip: a send, a
loop turn for the reply, a task's wake-up), and the operations a bridged call makes: the session read, a round's
save (a realistic record, its lease checked, one ownership claim and one event copied into the stream's copy, as
a step that asks the client saves them) and a round's end. Each operation runs in a child process under
callgrind twice, ``base`` and ``base + extra`` times (``--calls``), one at a time; the difference over ``extra``
is the count per operation, without the start-up and import costs. The keys go under a prefix of this run,
deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

from bench.redis_side import resolve_url

OPS = ("ping", "get_session", "put_round", "end_round")
BASE, EXTRA = 200, 1000
ASK = {"jsonrpc": "2.0", "id": "g-4f0c2a9e", "method": "sampling/createMessage", "params": {"messages": [
    {"role": "user", "content": {"type": "text", "text": "Summarize these files: README.md, docs/architecture.md"}}],
    "maxTokens": 400}}


def _operation(op: str, store: Any, stream: str) -> Callable[[int], Awaitable[Any]]:
    """The ``i``-th call of ``op`` on ``store`` (the records it needs are made here, once; ``stream``: the copy
    its events go to, new for each run, whose event numbers start at 1)."""
    from adapters.records import PendingRound
    from adapters.sse import Event
    from gateway.session.store import Owners, StreamAppend

    session = _session()
    record = PendingRound("b-" + "x" * 22, session.session_id, 7, "tools/call",
                          {"name": "summarize_repo", "arguments": {"repo": "bench"}}, started_ms=1)
    owners = Owners("replica-1", 60.0, frozenset({"oa:g-4f0c2a9e"}), frozenset())

    async def put_round(i: int) -> Any:
        copy = StreamAppend(session.session_id, stream, (Event(i + 1, ASK),), 100, i == 0, None)
        lease = ("replica-1", 5.0) if i == 0 else None
        return await store.put_round(record, lease, owners, holder=None if i == 0 else "replica-1", copy=copy)

    async def end_round(i: int) -> Any:
        return await store.end_round(f"b-{i}", "replica-1", release=("oa:g-4f0c2a9e",), delete=True)

    async def get_session(_i: int) -> Any:
        return await store.get_session(session.session_id)

    async def ping(_i: int) -> Any:
        return await store.wire.call("PING")
    return {"ping": ping, "get_session": get_session, "put_round": put_round, "end_round": end_round}[op]


def _session() -> Any:
    from adapters.records import SessionRecord
    return SessionRecord("s" * 43, "anonymous", "2025-11-25", {"sampling": {}, "roots": {}},
                         {"name": "bench", "version": "1"}, 1, 1)


async def _child(op: str, times: int, url: str, prefix: str) -> None:
    from gateway.session.redis_store import RedisStore

    store = RedisStore(url, idle_seconds=600, prefix=prefix, timeout_seconds=60)  # valgrind runs ~50x slower
    try:
        await store.put_session(_session())
        call = _operation(op, store, f"st{times}")
        for i in range(times):
            await call(i)
    finally:
        await store.close()


def count(op: str, url: str, base: int = BASE, extra: int = EXTRA) -> float:
    """Instructions per ``op``: the difference of two instrumented runs over their difference in calls."""
    folder, prefix = tempfile.mkdtemp(prefix="store-ops-"), f"bench-ops-{secrets.token_hex(4)}:"
    try:
        totals = []
        for times in (base, base + extra):
            out = os.path.join(folder, f"{op}.{times}")
            run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                                  "-m", "bench.store_ops", "--child", op, str(times), url, prefix],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                raise SystemExit(f"{op} under callgrind failed:\n{run.stderr[-2000:]}")
            totals.append(_total(out))
        return (totals[1] - totals[0]) / extra
    finally:
        _forget(url, prefix)
        shutil.rmtree(folder, ignore_errors=True)


def _total(out: str) -> int:
    for path in glob.glob(out + "*"):
        with open(path) as handle:
            for line in handle:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    raise RuntimeError(f"no callgrind total in {out}")


def _forget(url: str, prefix: str) -> None:
    from bench.instructions import _forget as forget
    forget(url, prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default=None, help="the Redis to use (default: REDIS_URL, else the local one)")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--calls", default=f"{BASE},{EXTRA}", help="BASE,EXTRA: calls in the two runs' difference")
    parser.add_argument("--child", nargs=4, metavar=("OP", "TIMES", "URL", "PREFIX"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        op, times, url, prefix = args.child
        asyncio.run(_child(op, int(times), url, prefix))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed: apt-get install valgrind")
    url = resolve_url(args.redis)
    if url is None:
        raise SystemExit("no Redis answers (--redis URL)")
    base, extra = (int(n) for n in args.calls.split(","))
    unknown = set(args.ops.split(",")) - set(OPS)
    if unknown or base < 1 or extra < 1:
        raise SystemExit(f"--ops from {','.join(OPS)} (not {sorted(unknown)}), --calls two positive counts")
    counts = {op: count(op, url, base, extra) for op in args.ops.split(",")}
    floor = counts.get("ping")
    for op, instructions in counts.items():
        versus = f"  ({instructions / floor:.2f}x a bare round trip)" if floor and op != "ping" else ""
        print(f"{op:12} {instructions:12,.0f} instructions{versus}")


if __name__ == "__main__":
    main()
