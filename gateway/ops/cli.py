"""The command line: ``python -m gateway serve | check-config FILE | reload --pid PID | report | check``.

``serve [--host 127.0.0.1] [--port 8808] [--upstream URL] [--config FILE] [--pid-file F] [--store URL]`` runs the
gateway (with the embedded core unless ``--upstream`` is given, on the in-memory session store unless ``--store``
names a Redis); with ``--config`` it reloads that file on SIGHUP.
``check-config FILE`` validates a file without serving (exit 2 and the key path on failure).
``reload --pid PID | --pid-file F`` asks a running gateway to re-read its file.
``trace FILE [--request ID] [--html OUT]`` summarizes a ``serve --trace FILE`` trace per legacy request.
``check --upstream URL`` plays a 2025-11-25 client through an in-process gateway, tool by tool (gateway.ops.check).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from aiohttp import web
from pydantic import ValidationError

from gateway.config.settings import ConfigError, GatewayConfig, StoreConfig, load_config
from gateway.ops.check import add_arguments as add_check_arguments
from gateway.ops.check import run as run_check
from gateway.ops.connections import run as run_capped
from gateway.ops.logs import install as install_log_filter
from gateway.ops.loops import CHOICES, install, tune_gc
from gateway.ops.trace import add_arguments as add_trace_arguments
from gateway.ops.trace import add_serve_arguments as add_serve_trace_arguments
from gateway.ops.trace import run as run_trace
from gateway.ops.trace import traced_app, with_trace
from gateway.telemetry.report import add_arguments as add_report_arguments
from gateway.telemetry.report import run as run_report
from gateway.telemetry.usage import serve_defaults as usage_serve_defaults


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m gateway", description="MCP 2025-11-25 -> 2026-07-28 gateway")
    commands = root.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the legacy endpoint at http://HOST:PORT/mcp")
    serve.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="listen port (default 8808)")
    serve.add_argument("--upstream", default=None, help="2026-07-28 server URL (default: the embedded core)")
    serve.add_argument("--config", default=None, help="TOML config file (see config/gateway.example.toml)")
    serve.add_argument("--no-access-log", action="store_true", help="do not log every request (benchmarks)")
    serve.add_argument("--pid-file", default=None, help="write the process id here (for `reload --pid-file`)")
    serve.add_argument("--loop", choices=CHOICES, default="asyncio",
                       help="event loop; asyncio (the default) is what the tests run on; see docs/benchmarks.md")
    serve.add_argument("--gc-gen0", type=int, default=10_000, metavar="N",
                       help="young-generation GC threshold after freezing the start-up heap; 0 keeps Python's "
                            "defaults (see docs/benchmarks.md)")
    serve.add_argument("--store", default=None, metavar="URL",
                       help="session store: 'memory' (the default) or redis://HOST:PORT/DB, shared by replicas "
                            "(overrides [gateway.store].url)")
    serve.add_argument("--usage-db", default=None,
                       help="usage store (default [gateway.usage].db, else gateway-usage.sqlite3)")
    add_serve_trace_arguments(serve)
    check = commands.add_parser("check-config", help="validate a configuration file without serving")
    check.add_argument("file")
    reload = commands.add_parser("reload", help="make a running gateway re-read its configuration file")
    target = reload.add_mutually_exclusive_group(required=True)
    target.add_argument("--pid", type=int)
    target.add_argument("--pid-file")
    add_report_arguments(commands.add_parser("report", help="the migration report from the usage store"))
    add_check_arguments(commands.add_parser("check", help="play a 2025-11-25 client through the gateway, tool by tool"))
    add_trace_arguments(commands.add_parser("trace", help="summarize a translation trace per legacy request"))
    return root


def check_config(path: str) -> int:
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return 2
    peers = ", ".join(p.name for p in config.pins.peers) or "(none)"
    print(f"ok: {path}: peers {peers}; default peer {config.pins.default_peer.name}; "
          f"upstreams {', '.join(config.pins.upstreams) or '(default only)'}")
    return 0


def send_reload(pid: int | None, pid_file: str | None) -> int:
    target = pid if pid is not None else int(Path(pid_file or "").read_text().strip())
    os.kill(target, signal.SIGHUP)
    print(f"sent SIGHUP to {target}")
    return 0


def served_app(args: argparse.Namespace) -> tuple[web.Application, GatewayConfig]:
    """The app ``serve`` runs, with everything its flags add (reload, pid file, GC tuning), and its config."""
    from gateway.ops.reload import install_sighup

    overrides = {"host": args.host, "port": args.port, "upstream_url": args.upstream}
    try:
        config = load_config(args.config, **overrides)
    except ConfigError as exc:
        raise SystemExit(f"gateway: {exc}") from None
    config = usage_serve_defaults(config, args.usage_db)  # serve keeps usage history by default
    config = with_trace(with_store(config, args.store), args.trace, args.trace_content)
    app = traced_app(config)  # create_app, with the trace as its tap when one is configured
    if args.config:
        install_sighup(app, args.config, **overrides)
    if args.pid_file:
        Path(args.pid_file).write_text(f"{os.getpid()}\n")

    async def tuned(_app: web.Application) -> None:  # a start-up hook: after the embedded core and stores started
        tune_gc(args.gc_gen0)
    app.on_startup.append(tuned)
    return app, config


def with_store(config: GatewayConfig, url: str | None) -> GatewayConfig:
    """``--store URL`` replaces the file's ``[gateway.store] url`` only: its prefix and timeout still apply."""
    if url is None:
        return config
    try:
        store = StoreConfig.model_validate({**config.store.model_dump(), "url": url})
    except ValidationError as exc:
        raise SystemExit(f"gateway: --store: {exc.errors()[0]['msg']}") from None
    return config.model_copy(update={"store": store})


def serve(args: argparse.Namespace) -> None:
    app, config = served_app(args)
    access_log = None if args.no_access_log else logging.getLogger("aiohttp.access")
    logging.getLogger("gateway").info("event loop: %s", install(args.loop))
    install_log_filter(config.connections.log_repeat_interval_seconds)
    run_capped(app, config, access_log=access_log)  # web.run_app, with max_client_connections


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.command == "check-config":
        raise SystemExit(check_config(args.file))
    if args.command == "check":
        raise SystemExit(run_check(args))
    if args.command == "report":
        raise SystemExit(run_report(args))
    if args.command == "trace":
        raise SystemExit(run_trace(args))
    if args.command == "reload":
        raise SystemExit(send_reload(args.pid, args.pid_file))
    serve(args)
