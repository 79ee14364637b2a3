"""``python -m modern_server --host 127.0.0.1 --port 8809 [--config FILE]``: serve the core alone;
``python -m modern_server check-config FILE`` validates a core configuration file without serving."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys

from aiohttp import web

from modern_server.app import create_app
from modern_server.config import ConfigError, CoreConfig, load_config


def check_config(argv: list[str]) -> int:
    """``check-config FILE``: exit 0 with a summary, or 2 with every problem of the file on one line."""
    parser = argparse.ArgumentParser(prog="python -m modern_server check-config",
                                     description="validate a core configuration file without serving")
    parser.add_argument("file")
    path = parser.parse_args(argv).file
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return 2
    print(f"ok: {path}: server {config.server_name} {config.server_version}")
    return 0


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["check-config"]:  # a subcommand before the serving flags, which stay as they were
        raise SystemExit(check_config(argv[1:]))
    parser = argparse.ArgumentParser(prog="python -m modern_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8809)
    parser.add_argument("--config", default=None, help="TOML file (see config/core.example.toml)")
    parser.add_argument("--no-access-log", action="store_true", help="do not log every request (benchmarks)")
    parser.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="asyncio",
                        help="event loop (auto: uvloop when installed; asyncio by default)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_config(args.config)
        app = create_app(config)
    except (ConfigError, ValueError) as exc:
        raise SystemExit(f"modern_server: {exc}") from None
    _install_loop(args.loop)

    def bound(message: str) -> None:  # aiohttp's "Running on URL" line, printed once the sockets are bound
        found = re.search(r"Running on (\S+)", message)
        logging.getLogger("modern_server").info("%s", banner(config, found.group(1) if found else
                                                             f"http://{args.host}:{args.port}"))
    # 2026 cancellation: a client closing the response stream cancels the request's handler.
    web.run_app(app, host=args.host, port=args.port, handler_cancellation=True, print=bound,
                access_log=None if args.no_access_log else logging.getLogger("aiohttp.access"))


def banner(config: CoreConfig, base: str) -> str:
    """One line: where the core serves, how states are sealed (whether they outlive this process) and where its
    notes are kept."""
    keys = f"state keys {', '.join(k.id for k in config.state_keys)}" if config.state_keys else \
        "a random state key (requestState does not outlive this process; see state_keys)"
    database = config.database or "a temporary file (notes do not outlive this process)"
    return f"serving MCP 2026-07-28 at {base}/mcp; {keys}; database: {database}"


def _install_loop(choice: str) -> None:
    if choice == "asyncio":
        return
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SystemExit("--loop uvloop: uvloop is not installed") from None
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


if __name__ == "__main__":
    main()
