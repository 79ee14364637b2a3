"""The migration report, pure: aggregated usage rows in, per-peer and per-client findings out.

Owns: folding stored rollup rows (``adapters.usage.KEY_FIELDS`` + count + rounds) into groups, the legacy share
per day, requests per transport (the door they came through), deprecated features still in use, translation
failures by cause, days until the peer's sunset and until 2027-07-28 (2026-07-28 §Deprecated), and the verdict;
and the other direction beside it: the reverse bridge's rows (era ``modern``, ``translated``: a 2026 client served
from a 2025-era upstream) by upstream, with the legacy features (input kinds), methods and clients that reach it;
and the 2025 clients relayed as they are to a 2025-era upstream (era ``legacy``, not translated, the upstream
named), by upstream: the era matrix's last cell, so the report says which legacy servers anyone still reaches.
The shell feeds rows one at a time (so it can show progress over a large store) and injects ``today``. Also owns
the report window (``--since``, ``/migration?since=``): its syntax and its bound, the history the store keeps.

Verdict rule: a group is *ready to cut over* when no deprecated feature (``adapters.usage.FEATURES``) was used
in the window; otherwise it is *blocked by* those features, in FEATURES order. ``legacy handshake`` is one of
them, so any legacy traffic blocks until the client moves to 2026-07-28 (and ``HTTP+SSE transport`` until it
leaves that door); a modern client that still answers
sampling or roots through MRTR is blocked by those (deprecated, removable from 2027-07-28).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from adapters.usage import (
    DAY_MS,
    FAILURE_CAUSES,
    FEATURES,
    HOUR_MS,
    INPUT_KINDS,
    REMOVAL_DATE,
    TRANSPORTS,
    day_number,
    days_until,
    iso_day,
)


# --- the window ---------------------------------------------------------------------------------------------
class WindowError(ValueError):
    """A window that cannot be read, or longer than the history kept: the message says which, in one line."""


class Unit(Enum):
    HOUR = "h"
    DAY = "d"
    WEEK = "w"

    @property
    def hours(self) -> int:
        return {Unit.HOUR: 1, Unit.DAY: 24, Unit.WEEK: 168}[self]


@dataclass(frozen=True, slots=True)
class Window:
    """The last ``count`` hours, days or weeks. Days and weeks are calendar days ending today (today counts);
    hours are clock hours ending with the current one (the store keeps hourly rows)."""

    count: int
    unit: Unit = Unit.DAY

    @property
    def hours(self) -> int:
        return self.count * self.unit.hours

    def first_ms(self, now_ms: int) -> int:
        """The start of the window's first hour (or day) when it ends at ``now_ms``."""
        if self.unit is Unit.HOUR:
            return (now_ms // HOUR_MS - self.count + 1) * HOUR_MS
        return (now_ms // DAY_MS - self.hours // 24 + 1) * DAY_MS

    def __str__(self) -> str:
        word = {Unit.HOUR: "hour", Unit.DAY: "day", Unit.WEEK: "week"}[self.unit]
        return f"{self.count} {word}{'' if self.count == 1 else 's'}"


_WINDOW = re.compile(r"([0-9]{1,7})([hdw]?)")


def parse_window(text: str, max_days: int | None) -> Window:
    """``30d``, ``4w``, ``24h`` (a bare number is days) -> a :class:`Window` of at most ``max_days`` (the
    store's retention: an older hour is gone, and every day of the window is a point of the report's series).
    ``max_days`` None checks the syntax only (a flag read before the configuration that bounds it)."""
    raw = (text or "").strip()
    match = _WINDOW.fullmatch(raw)
    if match is None:
        raise WindowError(f"must look like 30d, 4w or 24h, not {text[:40]!r}")
    window = Window(int(match.group(1)), Unit(match.group(2) or "d"))
    if window.count < 1:
        raise WindowError(f"must be at least 1h, not {raw!r}")
    if max_days is not None and window.hours > max_days * 24:
        raise WindowError(f"{raw} is longer than the {max_days} days of history kept ([gateway.usage] "
                          "retention_days)")
    return window


@dataclass
class Tally:
    """Counts for one group (a peer, or a peer's client)."""

    requests: int = 0
    legacy: int = 0
    translated: int = 0
    rounds: int = 0
    errors: int = 0
    cancelled: int = 0
    versions: set[str] = field(default_factory=set)
    days: dict[int, list[int]] = field(default_factory=dict)  # day number -> [legacy, modern]
    features: dict[str, int] = field(default_factory=dict)
    inputs: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    revisions: dict[str, int] = field(default_factory=dict)
    transports: dict[str, int] = field(default_factory=dict)

    def add(self, row: Mapping[str, Any]) -> None:
        n, legacy = int(row["count"]), row["era"] == "legacy"
        self.requests += n
        self.legacy += n if legacy else 0
        self.translated += n if row["translated"] else 0
        self.rounds += int(row["rounds"])
        self.errors += n if row["outcome"] == "error" else 0
        self.cancelled += n if row["outcome"] == "cancelled" else 0
        self.versions.add(row["client_version"])
        day = self.days.setdefault(int(row["bucket"]) // DAY_MS, [0, 0])
        day[0 if legacy else 1] += n
        _bump(self.revisions, row["revision"], n)
        _bump(self.transports, row.get("transport") or TRANSPORTS[0], n)
        for name in _split(row["features"]):
            _bump(self.features, name, n)
        for name in _split(row["inputs"]):
            _bump(self.inputs, name, n)
        if row["cause"] in FAILURE_CAUSES:
            _bump(self.failures, row["cause"], n)


def _bump(counts: dict[str, int], key: str, n: int) -> None:
    counts[key] = counts.get(key, 0) + n


def _by_count(counts: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _split(joined: str) -> list[str]:
    return [part for part in (joined or "").split(",") if part]


# --- the other direction: modern clients -> legacy servers -----------------------------------------------------
UNNAMED = "(not recorded)"  # a reverse row written before records named their upstream


def is_reverse(row: Mapping[str, Any]) -> bool:
    """A 2026 client's request the gateway carried to a 2025-era upstream: the client's era is ``modern`` and it
    was translated (a modern passthrough is not; a forward-bridged request's era is ``legacy``)."""
    return row["era"] == "modern" and bool(row["translated"])


def is_relayed(row: Mapping[str, Any]) -> bool:
    """A 2025 client's request relayed as it is to a 2025-era upstream: era ``legacy``, not translated, and the
    upstream named (the gateway's own sessions' rows name none)."""
    return row["era"] == "legacy" and not row["translated"] and bool(row.get("upstream"))


@dataclass
class Reach:
    """What 2026 clients reach through one legacy upstream: requests, rounds, input kinds, methods, clients."""

    requests: int = 0
    rounds: int = 0
    errors: int = 0
    cancelled: int = 0
    inputs: dict[str, int] = field(default_factory=dict)
    methods: dict[str, int] = field(default_factory=dict)
    clients: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)

    def add(self, row: Mapping[str, Any]) -> None:
        n = int(row["count"])
        self.requests += n
        self.rounds += int(row["rounds"])
        self.errors += n if row["outcome"] == "error" else 0
        self.cancelled += n if row["outcome"] == "cancelled" else 0
        _bump(self.methods, row["method"], n)
        _bump(self.clients, f"{row['peer']}/{row['client']}", n)
        for name in _split(row["inputs"]):
            _bump(self.inputs, name, n)
        if row["cause"] in FAILURE_CAUSES:
            _bump(self.failures, row["cause"], n)

    def summary(self) -> dict[str, Any]:
        return {"requests": self.requests, "rounds": self.rounds, "errors": self.errors, "cancelled": self.cancelled,
                "inputs": {k: self.inputs[k] for k in INPUT_KINDS if k in self.inputs},
                "methods": _by_count(self.methods), "clients": _by_count(self.clients),
                "failures": {c: self.failures[c] for c in FAILURE_CAUSES if c in self.failures}}


def verdict(features: Mapping[str, int]) -> str:
    blockers = [f for f in FEATURES if features.get(f)]
    return "ready to cut over" if not blockers else "blocked by: " + ", ".join(blockers)


@dataclass
class ReportBuilder:
    """Accumulates rows; :meth:`finish` renders the report as plain JSON-compatible data."""

    peers: dict[str, Tally] = field(default_factory=dict)
    clients: dict[tuple[str, str], Tally] = field(default_factory=dict)
    upstreams: dict[str, Reach] = field(default_factory=dict)
    relayed: dict[str, Reach] = field(default_factory=dict)
    rows: int = 0

    def add(self, row: Mapping[str, Any]) -> None:
        self.rows += 1
        self.peers.setdefault(row["peer"], Tally()).add(row)
        self.clients.setdefault((row["peer"], row["client"]), Tally()).add(row)
        if is_reverse(row):
            self.upstreams.setdefault(row.get("upstream") or UNNAMED, Reach()).add(row)
        elif is_relayed(row):
            self.relayed.setdefault(row["upstream"], Reach()).add(row)

    def finish(self, today: str, since_days: int, sunsets: Mapping[str, str | None]) -> dict[str, Any]:
        first = day_number(today) - since_days + 1
        peers = []
        for name in sorted(self.peers):
            entry = summarize(self.peers[name], first, day_number(today))
            sunset = sunsets.get(name)
            when = {"sunset": sunset, "days_until_sunset": days_until(sunset, today)}
            entry.update(peer=name, **when,
                         clients=[dict(summarize(t, first, day_number(today)), client=c, **when)
                                  for (p, c), t in sorted(self.clients.items()) if p == name])
            peers.append(entry)
        return {"today": today, "since_days": since_days, "removal_date": REMOVAL_DATE,
                "days_until_removal": days_until(REMOVAL_DATE, today), "rows_read": self.rows, "peers": peers,
                "reverse": [dict(self.upstreams[name].summary(), upstream=name) for name in sorted(self.upstreams)],
                "relayed": [dict(self.relayed[name].summary(), upstream=name) for name in sorted(self.relayed)]}


def summarize(tally: Tally, first_day: int, last_day: int) -> dict[str, Any]:
    series = [{"day": iso_day(d), "legacy": tally.days.get(d, [0, 0])[0], "modern": tally.days.get(d, [0, 0])[1]}
              for d in range(first_day, last_day + 1)]
    return {
        "requests": tally.requests, "legacy": tally.legacy, "modern": tally.requests - tally.legacy,
        "legacy_share": round(tally.legacy / tally.requests, 4) if tally.requests else 0.0,
        "translated": tally.translated, "mrtr_rounds": tally.rounds, "errors": tally.errors,
        "cancelled": tally.cancelled, "versions": sorted(tally.versions),
        "revisions": dict(sorted(tally.revisions.items())),
        "transports": {t: tally.transports[t] for t in (*TRANSPORTS, "other") if t in tally.transports},
        "features": {f: tally.features[f] for f in FEATURES if f in tally.features},
        "inputs": {k: tally.inputs[k] for k in INPUT_KINDS if k in tally.inputs},
        "failures": {c: tally.failures[c] for c in FAILURE_CAUSES if c in tally.failures},
        "series": series, "verdict": verdict(tally.features),
    }
