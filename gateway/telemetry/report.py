"""``python -m gateway report [--since 30d] [--format table|json|html] [--db FILE] [--config FILE]``
(the migration report).

Owns reading the usage store into :class:`kit.usage_report.ReportBuilder` (with progress on stderr while it
reads a large store) and the table/JSON renderers; HTML comes from :mod:`gateway.telemetry.dashboard`, so the
file and the ``/migration`` page are the same report. Sunsets come from the store (the pins each peer's sessions
carried) and, when ``--config`` is given, from that file's peers, which win.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from adapters.usage import DAY_MS, day_number, iso_day
from gateway.config.settings import ConfigError, GatewayConfig, load_config
from gateway.config.usage import DEFAULT_DB, UsageConfig
from gateway.telemetry.dashboard import render_html
from gateway.telemetry.usage import UsageDb
from kit.usage_report import ReportBuilder, Window, WindowError, parse_window

Progress = Callable[[int, int], None]


def since_flag(text: str) -> str:
    """``--since`` checked as argparse parses it: a bad window is a one-line usage error, not a traceback. Its
    bound (the configured retention) is checked in :func:`run`, once ``--config`` is read."""
    try:
        parse_window(text, max_days=None)
    except WindowError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def build_report(db: Any, window: Window, now_ms: int, sunsets: Mapping[str, str | None],
                 progress: Progress | None = None, every: int = 10_000) -> dict[str, Any]:
    since_ms = window.first_ms(now_ms)
    today = iso_day(now_ms // DAY_MS)
    total = db.count_rows(since_ms) if progress else 0
    builder = ReportBuilder()
    for row in db.rows(since_ms):
        builder.add(row)
        if progress and builder.rows % every == 0:
            progress(builder.rows, total)
    if progress:
        progress(builder.rows, total)
    report = builder.finish(today, now_ms // DAY_MS - since_ms // DAY_MS + 1, {**db.sunsets(), **sunsets})
    return {**report, "window": str(window)}


def stderr_progress(stream: TextIO = sys.stderr) -> Progress:
    def show(done: int, total: int) -> None:
        share = f" ({done * 100 // total}%)" if total else ""
        end = "\n" if done >= total else ("\r" if stream.isatty() else "\n")
        stream.write(f"reading usage store: {done}/{total} rows{share}{end}")
        stream.flush()
    return show


def render_table(report: dict[str, Any]) -> str:
    lines = [f"MCP migration report, {report['today']}, last {report['window']}; deprecated features "
             f"removable from {report['removal_date']} ({report['days_until_removal']} days)", ""]
    head = f"{'peer':<14} {'client':<24} {'requests':>8} {'legacy':>7} {'sunset':>18}  verdict"
    for peer in report["peers"]:
        lines += [head, "-" * len(head)]
        sunset = f"{peer['sunset']} ({peer['days_until_sunset']}d)" if peer["sunset"] else "none"
        for row in [dict(peer, client="(all)"), *peer["clients"]]:
            lines.append(f"{peer['peer']:<14} {row['client'][:24]:<24} {row['requests']:>8} "
                         f"{row['legacy_share']:>7.0%} {sunset:>18}  {row['verdict']}")
        lines.append(f"  transports: {_pairs(peer['transports'])}")
        lines.append(f"  deprecated features: {_pairs(peer['features'])}")
        lines.append(f"  translation failures: {_pairs(peer['failures'])}")
        lines.append(f"  legacy share by day: {_share_line(peer['series'])}")
        lines.append("")
    if not report["peers"]:
        lines.append("no traffic recorded in this window")
    return "\n".join(lines + _relayed_lines(report.get("relayed", [])) + _reverse_lines(report.get("reverse", [])))


def _relayed_lines(upstreams: list[dict[str, Any]]) -> list[str]:
    """The 2025 clients relayed as they are to 2025-era upstreams (shown only when there are some)."""
    lines = ["", "legacy clients -> legacy servers (relayed as they are)"] if upstreams else []
    for up in upstreams:
        lines.append(f"  {up['upstream']}: {up['requests']} requests, {up['errors']} errors, "
                     f"{up['cancelled']} cancelled")
        lines.append(f"    legacy features reached: {_pairs(up['inputs'])}")
        lines.append(f"    methods: {_pairs(up['methods'])}")
        lines.append(f"    clients: {_pairs(up['clients'])}")
    return lines


def _reverse_lines(upstreams: list[dict[str, Any]]) -> list[str]:
    """The other direction: which 2025-era upstreams 2026 clients still reach, and with which of their features."""
    lines = ["", "modern clients -> legacy servers (reverse bridge)"]
    for up in upstreams:
        lines.append(f"  {up['upstream']}: {up['requests']} requests, {up['rounds']} rounds, "
                     f"{up['errors']} errors, {up['cancelled']} cancelled")
        lines.append(f"    legacy features reached: {_pairs(up['inputs'])}")
        lines.append(f"    methods: {_pairs(up['methods'])}")
        lines.append(f"    clients: {_pairs(up['clients'])}")
        lines.append(f"    translation failures: {_pairs(up['failures'])}")
    if not upstreams:
        lines.append("  none in this window")
    return lines


def _pairs(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"


def _share_line(series: list[dict[str, Any]]) -> str:
    days = [d for d in series if d["legacy"] + d["modern"]]
    return " ".join(f"{d['day'][5:]}={d['legacy'] / (d['legacy'] + d['modern']):.0%}" for d in days[-14:]) or "-"


def config_sunsets(config: GatewayConfig | None) -> dict[str, str | None]:
    pins = getattr(config, "pins", None)
    if pins is None or not hasattr(pins, "peer_values"):
        return {}
    peers, default = pins.peer_values()
    return {p.name: p.sunset for p in (*peers, default)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", default="30d", type=since_flag,
                        help="window, e.g. 30d, 4w or 24h (default 30d; at most [gateway.usage] retention_days)")
    parser.add_argument("--format", choices=("table", "json", "html"), default="table")
    parser.add_argument("--db", default=DEFAULT_DB, help=f"usage store (default {DEFAULT_DB})")
    parser.add_argument("--config", default=None, help="gateway config: its peers' sunset dates win")
    parser.add_argument("--today", default=None, help=argparse.SUPPRESS)  # tests and what-if reports


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    try:
        config = load_config(args.config) if args.config else None
    except ConfigError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    try:
        window = parse_window(args.since, (config.usage if config else UsageConfig()).retention_days)
    except WindowError as exc:
        print(f"--since: {exc}", file=sys.stderr)
        return 2
    if not Path(args.db).exists():
        print(f"no usage store at {args.db} (serve writes it; see [gateway.usage].db)", file=sys.stderr)
        return 2
    try:
        db = UsageDb(args.db)
    except sqlite3.DatabaseError as exc:  # a file that is not a usage store: said in one line, no traceback
        print(f"{args.db} is not a usage store: {exc}", file=sys.stderr)
        return 2
    try:
        now_ms = (day_number(args.today) + 1) * DAY_MS - 1 if args.today else int(time.time() * 1000)
        report = build_report(db, window, now_ms, config_sunsets(config), stderr_progress())
    finally:
        db.close()
    text = {"json": lambda r: json.dumps(r, indent=2), "html": render_html, "table": render_table}[args.format]
    print(text(report), file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway report", description="MCP migration report")
    add_arguments(parser)
    return run(parser.parse_args(argv))
