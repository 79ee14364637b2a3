"""The benchmark's verdicts on its targets (docs/benchmarks.md "Targets"): each target read from one run's ratios and
judged against its limit. This is where the targets are checked (never by timing assertions in tests); ``--check`` turns
a missed target into a non-zero exit status, for a performance lane on a dedicated machine.

Which concurrency each target is read at (the targets name it for the latency ratios only):

- the latency ratios and the bridged round at c=1: at c=32 a median mostly measures queueing behind the other
  31 workers, not what one request or round costs (the bridged ratios at c=32 are printed, marked "reported");
- a bridged round's gateway CPU against a translated call's is reported at every concurrency, not judged: it is
  judged in instructions (``bench.instructions``), which the host's drift does not move;
- the gateway's CPU per translated request at every concurrency measured: the limit is a per-request cost, and
  batching at c=32 makes it cheaper than at c=1, so each is reported and judged;
- idle memory at every session count measured, and every count asked for must have been held.

A target whose input was not measured (``--concurrency 32`` alone, ``--idle ""``) is reported with ``met``
None: not measured is neither a pass nor a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Reader = Callable[[dict[str, Any]], float | None]


@dataclass(frozen=True)
class Target:
    name: str
    limit: float
    read: Reader
    at_most: bool = True  # False: the limit is a floor (sessions held)
    judged: bool = True  # False: printed beside its limit, never a miss

    def met(self, value: float) -> bool:
        return value <= self.limit if self.at_most else value >= self.limit


def _at(conc: int, key: str) -> Reader:
    return lambda ratios: (ratios.get(f"c{conc}") or {}).get(key)


def _idle(index: int, key: str) -> Reader:
    return lambda ratios: ratios["idle"][index].get(key)


def targets_for(ratios: dict[str, Any]) -> list[Target]:
    """The targets (docs/benchmarks.md "Targets"), for the concurrencies and idle counts this run measured."""
    out = [Target("passthrough/forwarder median, c=1", 1.10, _at(1, "passthrough/forwarder")),
           Target("translated/forwarder median, c=1", 1.15, _at(1, "translated/forwarder")),
           Target("bridged round added ms, c=1", 1.0, _at(1, "bridged_round_added_ms"))]
    for conc in sorted(int(key[1:]) for key in ratios if key.startswith("c") and key[1:].isdigit()):
        # A bridged call against the same MRTR rounds through the bare forwarder, and a round's CPU against a
        # plain call's: ratios measured in one run (an absolute CPU budget says nothing on another machine).
        out.append(Target(f"bridged/mrtr_forwarder median, c={conc}", 1.10, _at(conc, "bridged/mrtr_forwarder"),
                          judged=conc == 1))
        out.append(Target(f"bridged_one/mrtr_forwarder_one median, c={conc}", 1.10,
                          _at(conc, "bridged_one/mrtr_forwarder_one"), judged=conc == 1))
        out.append(Target(f"gateway CPU per bridged round / per translated call, c={conc}", 1.10,
                          _at(conc, "bridged_round_cpu/translated_cpu"), judged=False))
    out += _redis_targets(ratios) + _balanced_targets(ratios)
    for index, idle in enumerate(ratios.get("idle") or []):
        count = idle["sessions"]
        out.append(Target(f"KiB per idle session, {count} sessions", 24.0,
                          _idle(index, "kib_per_session")))
        out.append(Target(f"idle sessions whose GET stream stayed open, of {count}", float(count),
                          _idle(index, "held"), at_most=False))
    return out


def reverse_targets(ratios: dict[str, Any]) -> list[Target]:
    """``python -m bench.reverse``: a 2026 client's call through the reverse bridge against a 2025 client's call of
    the same tool on the legacy server itself, at c=1 (the gateway's hop and the client's extra round trip)."""
    return [Target("reverse_bridged/legacy_direct median, c=1", 1.3, _at(1, "reverse_bridged/legacy_direct")),
            # What the gateway adds to a bare-aiohttp reverse bridge doing the same exchanges (bench.reverse_floor),
            # the part of the ratio above that is the gateway's own: printed beside its limit, never a miss.
            Target("reverse_bridged/reverse_floor median, c=1", 1.10, _at(1, "reverse_bridged/reverse_floor"),
                   judged=False)]


def _redis_idle(index: int) -> Reader:
    return lambda ratios: ratios["redis_idle"][index].get("bytes_per_session")


def _redis_targets(ratios: dict[str, Any]) -> list[Target]:
    """The Redis store against the in-memory one in the same run (when it ran on Redis): latency at c=1, the
    gateway's CPU per request at every concurrency, bytes held in Redis per idle session. Two workers against
    one is reported, not judged: on a 2-core host shared with the client and the upstream it measures the host."""
    measured = [int(key[1:]) for key in ratios if key.startswith("c") and key[1:].isdigit()]
    if not any("translated redis/memory p50" in ratios[f"c{conc}"] for conc in measured):
        return []
    out = [Target(f"{name} redis/memory median, c=1", 1.15, _at(1, f"{name} redis/memory p50"))
           for name in ("translated", "bridged")]
    for conc in sorted(measured):
        out += [Target(f"{name} redis/memory gateway CPU per request, c={conc}", 1.15,
                       _at(conc, f"{name} redis/memory cpu")) for name in ("translated", "bridged")]
    for index, idle in enumerate(ratios.get("redis_idle") or []):
        out.append(Target(f"bytes in Redis per idle session, {idle['sessions']} sessions", 4096.0,
                          _redis_idle(index)))
    return out


def _balanced_targets(ratios: dict[str, Any]) -> list[Target]:
    """Three replicas behind the balancer against one gateway on Redis (when they ran, bench.balancer): a bridged
    call at every concurrency (its rounds cross replicas, so a wait on that path shows at any load), a translated
    one at c=1; and the Redis round trips of a two-round bridged call on one replica (when counted)."""
    measured = sorted(int(key[1:]) for key in ratios if key.startswith("c") and key[1:].isdigit())
    out = []
    if any("bridged_rr/bridged_redis p50" in ratios[f"c{conc}"] for conc in measured):
        out.append(Target("translated_rr/translated_redis median, c=1", 1.15,
                          _at(1, "translated_rr/translated_redis p50")))
        out += [Target(f"bridged_rr/bridged_redis median, c={conc}", 1.30, _at(conc, "bridged_rr/bridged_redis p50"))
                for conc in measured]
    if any("translated_rr/translated_redis over its floor" in ratios[f"c{conc}"] for conc in measured):
        # The same over their floor (three bare forwarders behind the balancer against one directly): the part the
        # gateway's replicas add, printed beside its limit and never a miss. A relayed answer may add its two
        # messages per round (the owner's lookup with the publish, and the owner's wake), hence 1.15.
        out.append(Target("translated_rr/translated_redis over its floor, c=1", 1.10,
                          _at(1, "translated_rr/translated_redis over its floor"), judged=False))
        out += [Target(f"bridged_rr/bridged_redis over its floor, c={conc}", 1.15,
                       _at(conc, "bridged_rr/bridged_redis over its floor"), judged=False) for conc in measured]
    if (ratios.get("store_trips") or {}).get("one replica") is not None:
        out.append(Target("Redis round trips per two-round bridged call", 6.0,
                          lambda r: r["store_trips"]["one replica"]))
    return out


def verdicts(ratios: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target: its limit, the measured value, and whether it was met (None: not measured)."""
    rows = []
    for target in targets_for(ratios):
        value = target.read(ratios)
        rows.append({"target": target.name, "limit": target.limit, "at_most": target.at_most, "value": value,
                     "met": None if value is None else target.met(value), "judged": target.judged})
    return rows


def print_verdicts(rows: list[dict[str, Any]]) -> None:
    print(f"{'target':<56}{'limit':>10}{'measured':>11}  verdict")
    for row in rows:
        value = "-" if row["value"] is None else (f"{row['value']:.3f}" if isinstance(row["value"], float)
                                                  else str(row["value"]))
        verdict = {True: "met", False: "NOT MET", None: "not measured"}[row["met"]]
        if not row["judged"] and row["met"] is not None:
            verdict = "reported" + (" (over)" if row["met"] is False else "")
        bound = ("<= " if row["at_most"] else ">= ") + format(row["limit"], "g")
        print(f"{row['target']:<56}{bound:>10}{value:>11}  {verdict}")


def missed(rows: list[dict[str, Any]]) -> list[str]:
    return [row["target"] for row in rows if row["met"] is False and row["judged"]]
