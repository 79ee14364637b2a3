"""``python -m bench [--duration S] [--warmup S] [--slice S] [--concurrency 1,32] [--idle 1000,10000]
[--json FILE] [--loop asyncio|uvloop] [--gc-gen0 N] [--check]``.

Prints the machine it ran on, then one table and the ratios the project's targets are stated in, all measured in
this one run: translated/forwarder and passthrough/forwarder median latency at concurrency 1, gateway CPU time per
translated request, the added cost of one bridged MRTR round, and resident memory per idle legacy session; then
each target with its verdict (:mod:`bench.targets`). ``--check`` exits with status 1 when one is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

import aiohttp

from bench.balancer import (
    BALANCED_SCENARIOS,
    FLOOR_SCENARIOS,
    LB1_SCENARIOS,
    BalancedForwarders,
    BalancedGateways,
    OneBehind,
    balanced_ratios,
    haproxy_binary,
    store_trips,
)
from bench.clients import LegacyClient, ModernClient
from bench.echo import hop_rtt_us
from bench.procs import Child, scratch_config, scratch_usage_db
from bench.redis_side import REDIS_SCENARIOS, WORKERS_SCENARIO, RedisGateways, idle_bytes, redis_ratios, resolve_url
from bench.targets import missed, print_verdicts, verdicts

_Started = TypeVar("_Started", Child, RedisGateways, BalancedGateways, OneBehind, BalancedForwarders)
_Stoppable = Child | RedisGateways | BalancedGateways | OneBehind | BalancedForwarders


class Front(Protocol):
    """What a scenario's client talks to, whose CPU is read around its slices (a process, or the balanced
    replicas together)."""

    def cpu_times(self) -> tuple[float, float]: ...

Op = Callable[[], Awaitable[Any]]
SCENARIOS = ("direct", "forwarder", "passthrough", "translated", "mrtr_direct", "mrtr_forwarder", "bridged",
             "mrtr_forwarder_one", "bridged_one")


@dataclass
class Stats:
    scenario: str
    concurrency: int
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    rps: float
    # CPU of the process the client talks to (the core for direct, the forwarder, or the gateway) per request,
    # and the system time in it (the kernel's share: sends, receives, the loop's waits).
    front_cpu_us_per_request: float | None = None
    front_sys_us_per_request: float | None = None
    # All the CPU one request took on this machine: the client (this process), the front and, behind a
    # forwarder or the gateway, the core. At a concurrency that keeps the cores busy, the median follows it.
    machine_cpu_us_per_request: float | None = None


def _summary(name: str, conc: int, lat: list[float], seconds: float, cpu: tuple[float, float],
             machine: float) -> Stats:
    """``cpu``: the front process's user and system seconds over the scenario's slices; ``machine``: the CPU
    seconds of every process the scenario ran on (:func:`interleaved`)."""
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    per = (sum(cpu) / len(lat) * 1e6, cpu[1] / len(lat) * 1e6, machine / len(lat) * 1e6) if lat else None
    return Stats(name, conc, len(lat), round(seconds, 2), round(statistics.median(lat) * 1e3, 3),
                 round(p99 * 1e3, 3), round(len(lat) / seconds, 1), round(per[0], 1) if per else None,
                 round(per[1], 1) if per else None, round(per[2], 1) if per else None)


def _own_cpu() -> float:
    """This process's CPU seconds: the benchmark's clients."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _load(ops: list[Op], seconds: float) -> list[float]:
    """Each op runs in its own worker loop for ``seconds``; the latency of every request started in it."""
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds

    async def worker(op: Op) -> None:
        while (began := time.perf_counter()) < stop_at:
            await op()
            latencies.append(time.perf_counter() - began)

    await asyncio.gather(*(worker(op) for op in ops))
    return latencies


async def interleaved(ops: dict[str, list[Op]], conc: int, args: argparse.Namespace,
                      front: Mapping[str, Front], behind: Child | None = None) -> list[Stats]:
    """Every scenario in short alternating slices (order reversed every round) instead of one after another:
    this machine's speed drifts by tens of percent over seconds (a shared host), and a drift then slows all
    scenarios alike instead of skewing the ratios between them. The CPU of each scenario's front process (the
    one its client talks to), of the process ``behind`` it if any (the core behind a forwarder or the gateway)
    and of this one (the clients) is read around each slice."""
    for name in ops:  # warm-up, not counted
        await _load(ops[name], args.warmup)
    lat: dict[str, list[float]] = {name: [] for name in ops}
    cpu = {name: (0.0, 0.0) for name in ops}
    whole = dict.fromkeys(ops, 0.0)

    def others(name: str) -> float:
        """The CPU seconds so far of this process and of the one behind ``name``'s front (when not the front)."""
        return _own_cpu() + (sum(behind.cpu_times()) if behind is not None and behind is not front[name] else 0.0)

    rounds = max(1, round(args.duration / args.slice))
    for number in range(rounds):
        for name in (list(ops) if number % 2 == 0 else list(reversed(ops))):
            before, begun = front[name].cpu_times(), others(name)
            lat[name].extend(await _load(ops[name], args.slice))
            after, ended, (user, system) = front[name].cpu_times(), others(name), cpu[name]
            cpu[name] = (user + after[0] - before[0], system + after[1] - before[1])
            whole[name] += ended - begun + sum(after) - sum(before)
    seconds = rounds * args.slice
    return [_summary(name, conc, lat[name], seconds, cpu[name], whole[name]) for name in ops]


def makers(http: aiohttp.ClientSession, core: Child, gw: Child, fwd: Child,
           redis: RedisGateways | None = None,
           balanced: BalancedGateways | None = None,
           one_behind: OneBehind | None = None,
           floor: BalancedForwarders | None = None) -> dict[str, Callable[[], Awaitable[Op]]]:
    async def modern(url: str) -> Op:
        return ModernClient(http, url).echo

    async def mrtr(url: str) -> Op:  # a 2026-07-28 client doing summarize_repo's two rounds itself
        return ModernClient(http, url).summarize

    async def one_round(url: str) -> Op:
        return ModernClient(http, url).draft

    async def legacy_prompt(name: str, arguments: dict[str, Any], url: str = gw.url) -> Op:
        client = LegacyClient(http, url)
        await client.start()

        async def op() -> None:
            if not await client.prompt(name, arguments):
                raise RuntimeError(f"prompts/get {name} through the gateway failed")
        return op

    async def legacy(tool: str, arguments: dict[str, Any], url: str = gw.url) -> Op:
        client = LegacyClient(http, url)
        await client.start()

        async def op() -> None:
            if not await client.call(tool, arguments):
                raise RuntimeError(f"{tool} through the gateway failed")
        return op

    made: dict[str, Callable[[], Awaitable[Op]]] = {
        "direct": lambda: modern(core.url),
        "forwarder": lambda: modern(fwd.url),
        "passthrough": lambda: modern(gw.url),
        "translated": lambda: legacy("echo", {"text": "hi"}),
        "mrtr_direct": lambda: mrtr(core.url),
        # The same MRTR rounds through the bare forwarder: what a bridged call is measured against.
        "mrtr_forwarder": lambda: mrtr(fwd.url),
        "bridged": lambda: legacy("summarize_repo", {"repo": "bench"}),
        # One round: draft_note's form elicitation, done by a 2026 client through the forwarder, and bridged.
        "mrtr_forwarder_one": lambda: one_round(fwd.url),
        "bridged_one": lambda: legacy_prompt("draft_note", {"topic": "bench"}),
    }
    if redis is not None:  # the same on the Redis store, and with two workers on it
        made["translated_redis"] = lambda: legacy("echo", {"text": "hi"}, redis.one.url)
        made["bridged_redis"] = lambda: legacy("summarize_repo", {"repo": "bench"}, redis.one.url)
        made[WORKERS_SCENARIO] = lambda: legacy("echo", {"text": "hi"}, redis.two.url)
    if balanced is not None:  # the same through the balancer: each request of a session on another replica
        rr = balanced.front_url
        made["translated_rr"] = lambda: legacy("echo", {"text": "hi"}, rr)
        made["bridged_rr"] = lambda: legacy("summarize_repo", {"repo": "bench"}, rr)
        made["bridged_one_rr"] = lambda: legacy_prompt("draft_note", {"topic": "bench"}, rr)
    if one_behind is not None:  # the Redis gateway behind the same balancer alone: the hop's own cost
        lb1 = one_behind.front_url
        made[LB1_SCENARIOS["translated"]] = lambda: legacy("echo", {"text": "hi"}, lb1)
        made[LB1_SCENARIOS["bridged"]] = lambda: legacy("summarize_repo", {"repo": "bench"}, lb1)
    if floor is not None:  # three bare forwarders behind the same balancer: the spreading's floor
        made["forwarder_rr"] = lambda: modern(floor.front_url)
        made["mrtr_forwarder_rr"] = lambda: mrtr(floor.front_url)
    return made


async def idle_sessions(http: aiohttp.ClientSession, gw: Child, count: int) -> dict[str, Any]:
    """Open ``count`` legacy sessions, each with its GET stream, and read the gateway's resident memory."""
    await asyncio.sleep(0.5)
    before = gw.rss_bytes()
    clients = [LegacyClient(http, gw.url) for _ in range(count)]
    streams: list[aiohttp.ClientResponse] = []
    for batch in range(0, count, 100):
        group = clients[batch:batch + 100]
        await asyncio.gather(*(c.start() for c in group))
        streams.extend(await asyncio.gather(*(c.open_get_stream() for c in group)))
    await asyncio.sleep(1.0)
    after = gw.rss_bytes()
    held = sum(1 for stream in streams if not stream.content.is_eof())  # the gateway closed none of them
    for stream in streams:
        stream.close()
    return {"sessions": count, "rss_before_mib": round(before / 2**20, 1), "rss_after_mib": round(after / 2**20, 1),
            "kib_per_session": round((after - before) / count / 1024, 2), "held": held}


def ratios(results: list[Stats], idle: list[dict[str, Any]], redis_idle: list[dict[str, Any]] | None = None,
           trips: dict[str, Any] | None = None) -> dict[str, Any]:
    at = {(r.scenario, r.concurrency): r for r in results}
    out: dict[str, Any] = {}
    for conc in sorted({r.concurrency for r in results}):
        def get(name: str, conc: int = conc) -> float:
            return at[(name, conc)].p50_ms
        out[f"c{conc}"] = {
            "translated/direct": round(get("translated") / get("direct"), 3),
            "translated/forwarder": round(get("translated") / get("forwarder"), 3),
            "passthrough/forwarder": round(get("passthrough") / get("forwarder"), 3),
            # summarize_repo is two input_required rounds on top of the translated call.
            "bridged_round_ms": round((get("bridged") - get("translated")) / 2, 3),
            "bridged_round/direct": round((get("bridged") - get("translated")) / 2 / get("direct"), 3),
            # What the gateway adds per round: the same two rounds done by a 2026 client directly on the core
            # (mrtr_direct) cost the core's MRTR work and the client's answers; the rest is the gateway's.
            "bridged_round_added_ms": round(((get("bridged") - get("translated"))
                                             - (get("mrtr_direct") - get("direct"))) / 2, 3),
            "bridged/mrtr_forwarder": round(get("bridged") / get("mrtr_forwarder"), 3),
            "bridged_one/mrtr_forwarder_one": round(get("bridged_one") / get("mrtr_forwarder_one"), 3),
            "bridged_round_cpu/translated_cpu": _round_cpu_ratio(at, conc),
            # The same in system time alone and in user time alone: where a round's extra cost lies.
            "bridged_round_sys/translated_sys": _round_sys_ratio(at, conc),
            "bridged_round_user/translated_user": _round_user_ratio(at, conc),
            "gateway_cpu_us_per_translated": at[("translated", conc)].front_cpu_us_per_request,
            "gateway_cpu_us_per_passthrough": at[("passthrough", conc)].front_cpu_us_per_request,
            "forwarder_cpu_us": at[("forwarder", conc)].front_cpu_us_per_request,
        } | _machine_ratios(at, conc) | redis_ratios(at, conc) | balanced_ratios(at, conc)
    out["idle"] = idle
    out["redis_idle"] = redis_idle or []
    out["store_trips"] = trips or {}  # Redis round trips per two-round bridged call (bench.balancer)
    return out


def _round_cpu_ratio(at: dict[tuple[str, int], Stats], conc: int) -> float | None:
    """The gateway's CPU per bridged round over its CPU per translated call: summarize_repo is the call plus two
    rounds, so one round costs (bridged - translated) / 2."""
    return _per_round(*(at[(name, conc)].front_cpu_us_per_request for name in ("bridged", "translated")))


def _round_sys_ratio(at: dict[tuple[str, int], Stats], conc: int) -> float | None:
    return _per_round(*(at[(name, conc)].front_sys_us_per_request for name in ("bridged", "translated")))


def _round_user_ratio(at: dict[tuple[str, int], Stats], conc: int) -> float | None:
    user: list[float] = []
    for name in ("bridged", "translated"):
        stats = at[(name, conc)]
        if stats.front_cpu_us_per_request is None or stats.front_sys_us_per_request is None:
            return None
        user.append(stats.front_cpu_us_per_request - stats.front_sys_us_per_request)
    return _per_round(*user)


# A bridged scenario, the MRTR scenario it is measured against, and how many gateway hops it is (the call and
# each of its rounds).
_BRIDGED = {"bridged": ("mrtr_forwarder", 3), "bridged_one": ("mrtr_forwarder_one", 2)}


def _machine_ratios(at: dict[tuple[str, int], Stats], conc: int) -> dict[str, float]:
    """Where a bridged call's median goes when the cores are busy (docs/benchmarks.md "Where the bridged
    ratios come from"), for each bridged scenario against its MRTR one through the forwarder:

    - ``machine cpu``: the ratio of all the CPU one call took (clients, front, core). At c=32 the median ratio
      follows it, so it shows how much of the median's gap is work rather than waiting;
    - ``at a plain call's price``: that ratio had each of the gateway's hops (the call and each round) cost
      exactly what a translated call costs the gateway in the same run, the client and the core unchanged;
    - ``gateway cpu budget us``: the gateway CPU per call at which the machine ratio would be 1.10, beside
      ``gateway cpu us``, what it took."""
    out: dict[str, float] = {}
    plain = at[("translated", conc)].front_cpu_us_per_request
    for name, (against, hops) in _BRIDGED.items():
        ours, theirs = at[(name, conc)], at[(against, conc)]
        if not (ours.machine_cpu_us_per_request and theirs.machine_cpu_us_per_request
                and ours.front_cpu_us_per_request and plain):
            continue
        rest = ours.machine_cpu_us_per_request - ours.front_cpu_us_per_request  # the client's and the core's
        out[f"{name}/{against} machine cpu"] = round(ours.machine_cpu_us_per_request
                                                     / theirs.machine_cpu_us_per_request, 3)
        out[f"{name}/{against} at a plain call's price"] = round((rest + hops * plain)
                                                                 / theirs.machine_cpu_us_per_request, 3)
        out[f"{name} gateway cpu us"] = ours.front_cpu_us_per_request
        out[f"{name} gateway cpu budget us"] = round(1.10 * theirs.machine_cpu_us_per_request - rest, 1)
    return out


def _per_round(bridged: float | None, translated: float | None) -> float | None:
    """One round's cost over one call's, from a call with two rounds and a plain call."""
    if bridged is None or not translated:
        return None
    return round((bridged - translated) / 2 / translated, 3)


def machine(args: argparse.Namespace, hops: list[float]) -> dict[str, Any]:
    """What the numbers came from (docs/benchmarks.md states it beside them): CPU, cores, interpreter, libraries, the
    process settings this run used, and the loopback round trip between two Python processes measured before and
    after the scenarios (:mod:`bench.echo`: the hop cost no gateway code can remove)."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), model)
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "aiohttp": aiohttp.__version__, "loop": args.loop, "gc_gen0": args.gc_gen0,
            "hop_rtt_us": hops, "date": time.strftime("%Y-%m-%d")}


def print_table(results: list[Stats], summary: dict[str, Any]) -> None:
    print(f"{'scenario':<19}{'conc':>5}{'requests':>10}{'p50 ms':>10}{'p99 ms':>10}{'req/s':>10}"
          f"{'front CPU us/req':>18}{'of it sys':>11}{'all CPU us/req':>16}")
    for r in results:
        cpu, sys_, whole = ("" if value is None else f"{value:.0f}" for value in (
            r.front_cpu_us_per_request, r.front_sys_us_per_request, r.machine_cpu_us_per_request))
        print(f"{r.scenario:<19}{r.concurrency:>5}{r.requests:>10}{r.p50_ms:>10.3f}{r.p99_ms:>10.3f}{r.rps:>10.1f}"
              f"{cpu:>18}{sys_:>11}{whole:>16}")
    print(json.dumps(summary, indent=2))


def _kept(started: list[_Stoppable], child: _Started) -> _Started:
    started.append(child)
    return child


# The benchmark opens no WebSocket or HTTP+SSE door session, but the gateway sets descriptors aside for them
# (gateway.ops.connections.door_cap: about half of what is left), which at a 20,000 descriptor limit caps client
# connections at 9,464, below the 10,000 idle streams. One door session's room leaves them to the idle streams.
IDLE_ROOM = "[gateway.connections]\ndoor_max_sessions = 1\n"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    loop = ["--loop", args.loop]
    redis_url = resolve_url(args.redis)
    # Stopped at the end, also on a failed start.
    started: list[_Stoppable] = []
    results: list[Stats] = []
    try:
        core = _kept(started, Child("core", ["-m", "modern_server", "--port", "{port}", "--no-access-log", *loop]))
        gw = _kept(started, Child("gateway", [
            "-m", "gateway", "serve", "--port", "{port}", "--upstream", core.url, "--no-access-log", *loop,
            "--gc-gen0", str(args.gc_gen0), "--usage-db", scratch_usage_db(), "--config", scratch_config(IDLE_ROOM)]))
        fwd = _kept(started, Child("forwarder", ["-m", "bench.forwarder", "--port", "{port}", "--upstream", core.url,
                                                 *loop]))
        echo = _kept(started, Child("echo", ["-m", "bench.echo", "--port", "{port}", *loop]))
        redis = (_kept(started, RedisGateways(redis_url, core.url, [*loop, "--gc-gen0", str(args.gc_gen0)]))
                 if redis_url else None)
        binary = haproxy_binary() if redis_url else None
        balanced = (_kept(started, BalancedGateways(binary, redis_url, core.url, [*loop, "--gc-gen0",
                                                                                  str(args.gc_gen0)]))
                    if binary and redis_url else None)
        one_behind = (_kept(started, OneBehind(binary, redis.one.port))
                      if binary is not None and redis is not None and balanced is not None else None)
        floor = (_kept(started, BalancedForwarders(binary, core.url, loop))
                 if binary is not None and balanced is not None else None)
        hops = [await hop_rtt_us(echo.port)]
        trips: dict[str, Any] = {}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            make = makers(http, core, gw, fwd, redis, balanced, one_behind, floor)
            front: dict[str, Front] = {"direct": core, "mrtr_direct": core, "forwarder": fwd, "mrtr_forwarder": fwd,
                                       "mrtr_forwarder_one": fwd}
            if redis is not None:
                front |= dict.fromkeys(REDIS_SCENARIOS, redis.one) | {WORKERS_SCENARIO: redis.two}
            if balanced is not None:
                front |= dict.fromkeys(BALANCED_SCENARIOS, balanced)
            if one_behind is not None and redis is not None:
                front |= dict.fromkeys(LB1_SCENARIOS.values(), redis.one)  # the gateway's CPU, not the balancer's
            if floor is not None:
                front |= dict.fromkeys(FLOOR_SCENARIOS, floor)
            for conc in args.concurrency:
                ops = {name: [await make[name]() for _ in range(conc)] for name in make}
                results.extend(await interleaved(ops, conc, args, {n: front.get(n, gw) for n in make}, core))
            hops.append(await hop_rtt_us(echo.port))  # before the idle sessions' memory is taken
            idle = [await idle_sessions(http, gw, n) for n in args.idle]
            redis_idle = [await idle_bytes(http, redis, args.redis_idle)] if redis and args.redis_idle else []
            if redis_url:
                trips = await store_trips(http, redis_url, core.url, [*loop, "--gc-gen0", str(args.gc_gen0)])
    finally:
        for child in reversed(started):
            child.stop()
    summary, host = ratios(results, idle, redis_idle, trips), machine(args, hops)
    host["redis"] = redis_url
    host["balancer"] = binary  # the replicas behind it ran the _rr scenarios (None: not run)
    if redis is not None:
        host["redis_prefix"] = redis.prefix  # its keys are deleted at the end
    print("machine: " + ", ".join(f"{k} {v}" for k, v in host.items()))
    print_table(results, summary)
    judged = verdicts(summary)
    print_verdicts(judged)
    return {"machine": host, "results": [asdict(r) for r in results], "ratios": summary, "targets": judged}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--duration", type=float, default=4.0, help="measured seconds per scenario")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds per scenario not counted")
    parser.add_argument("--slice", type=float, default=0.5, help="seconds per scenario per alternating round")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 32])
    parser.add_argument("--idle", type=lambda s: [int(x) for x in s.split(",") if x], default=[1000, 10000])
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="asyncio",
                        help="event loop of the core, the gateway and the forwarder")
    parser.add_argument("--gc-gen0", type=int, default=10_000, help="the gateway's --gc-gen0 (0: Python's defaults)")
    parser.add_argument("--redis", default=None, metavar="URL",
                        help="also run on the Redis store (default: REDIS_URL, else redis://127.0.0.1:6379/0 when "
                             "it answers; '' leaves it out)")
    parser.add_argument("--redis-idle", type=int, default=200, help="idle sessions for the bytes held in Redis")
    parser.add_argument("--check", action="store_true", help="exit with status 1 when a measured target is missed")
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # children inherit it: 10,000 streams need it
    report = asyncio.run(run(args))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    if args.check and missed(report["targets"]):
        raise SystemExit(f"targets missed: {', '.join(missed(report['targets']))}")


if __name__ == "__main__":
    main()
