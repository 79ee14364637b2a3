"""The migration report, pure: aggregated usage rows in, per-peer and per-client findings out.

Owns: folding stored rollup rows (``adapters.usage.KEY_FIELDS`` + count + rounds) into groups, the legacy share
per day, requests per transport (the door they came through), deprecated features still in use, translation
failures by cause, days until the peer's sunset and until 2027-07-28 (2026-07-28 §Deprecated), and the verdict.
The shell feeds rows one at a time (so it can show progress over a large store) and injects ``today``.

Verdict rule: a group is *ready to cut over* when no deprecated feature (``adapters.usage.FEATURES``) was used
in the window; otherwise it is *blocked by* those features, in FEATURES order. ``legacy handshake`` is one of
them, so any legacy traffic blocks until the client moves to 2026-07-28 (and ``HTTP+SSE transport`` until it
leaves that door); a modern client that still answers
sampling or roots through MRTR is blocked by those (deprecated, removable from 2027-07-28).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.usage import (
    DAY_MS,
    FAILURE_CAUSES,
    FEATURES,
    INPUT_KINDS,
    REMOVAL_DATE,
    TRANSPORTS,
    day_number,
    days_until,
    iso_day,
)


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


def _split(joined: str) -> list[str]:
    return [part for part in (joined or "").split(",") if part]


def verdict(features: Mapping[str, int]) -> str:
    blockers = [f for f in FEATURES if features.get(f)]
    return "ready to cut over" if not blockers else "blocked by: " + ", ".join(blockers)


@dataclass
class ReportBuilder:
    """Accumulates rows; :meth:`finish` renders the report as plain JSON-compatible data."""

    peers: dict[str, Tally] = field(default_factory=dict)
    clients: dict[tuple[str, str], Tally] = field(default_factory=dict)
    rows: int = 0

    def add(self, row: Mapping[str, Any]) -> None:
        self.rows += 1
        self.peers.setdefault(row["peer"], Tally()).add(row)
        self.clients.setdefault((row["peer"], row["client"]), Tally()).add(row)

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
                "days_until_removal": days_until(REMOVAL_DATE, today), "rows_read": self.rows, "peers": peers}


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
