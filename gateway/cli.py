"""``python -m gateway serve [--host 127.0.0.1] [--port 8808] [--upstream URL] [--config FILE]``."""

from __future__ import annotations

import argparse
import logging

from aiohttp import web

from gateway.app import create_app
from gateway.config import load_config


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m gateway", description="MCP 2025-11-25 -> 2026-07-28 gateway")
    commands = root.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the legacy endpoint at http://HOST:PORT/mcp")
    serve.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="listen port (default 8808)")
    serve.add_argument("--upstream", default=None, help="2026-07-28 server URL (default: the embedded core)")
    serve.add_argument("--config", default=None, help="TOML config file (see config/gateway.example.toml)")
    serve.add_argument("--no-access-log", action="store_true", help="do not log every request (benchmarks)")
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = load_config(args.config, host=args.host, port=args.port, upstream_url=args.upstream)
    access_log = None if args.no_access_log else logging.getLogger("aiohttp.access")
    web.run_app(create_app(config), host=config.host, port=config.port, access_log=access_log)
