"""The stdio door: ``python -m gateway stdio`` for desktop clients that launch their MCP servers as subprocesses.

Newline-delimited JSON-RPC comes in on stdin and goes out on stdout (logs only on stderr, 2025-11-25
basic/transports §stdio); one legacy session lives as long as the process. The door decides nothing: it is a
client of the gateway's own Streamable HTTP endpoint, served in this process on a Unix socket in a private
temporary folder, so every session rule, limit, pin, bridge round and telemetry record is the one the HTTP door
has. Each message is POSTed as it arrives (a bridged request's SSE stream stays open while the client answers
the sampling, elicitation or roots request it carries on stdin), every message of every answer is written as
one line, and the session's GET stream carries what is not tied to a request. When stdin closes the session is
deleted, which cancels its rounds upstream, and the process exits.

Like ``serve``, the door records usage by default in ``gateway-usage.sqlite3`` in the working directory (``--usage-db``,
else ``[gateway.usage].db``), so its sessions reach the migration report; ``--print-config NAME`` prints the
desktop client's entry that launches it, with absolute paths (a desktop client's PATH has no virtual environment,
and its working directory is not the operator's), the usage database included.

A line longer than ``max_request_bytes`` (the endpoint's own bound) is never held whole: its first bytes are kept
to find its id, the rest is discarded as it arrives, and it is refused under that id (``adapters.doors.too_large``)
while the session goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from adapters.doors import ID_SCAN_BYTES, Transport, too_large
from gateway.config.settings import GatewayConfig
from gateway.http.app import create_app
from gateway.http.door import DoorClient
from gateway.http.door_hop import DOOR_HOP_TIMEOUT
from gateway.http.keys import GATEWAY
from gateway.ops.stdio_login import UpstreamSetup, login_argv
from gateway.ops.stdio_login import add_arguments as add_login_arguments

READ_BYTES = 1 << 16  # read from stdin at a time


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line over the limit: only its first bytes, where its id may be read."""

    prefix: bytes


class Lines:
    """Splits what stdin sends into lines (newline-delimited, 2025-11-25 basic/transports §stdio) of at most
    ``limit`` bytes. A longer line is reported once, as soon as it passes the limit, and the rest of it is
    dropped up to its newline: memory stays bounded however long it is."""

    def __init__(self, limit: int) -> None:
        self.limit, self.buffer, self.dropping = limit, bytearray(), False

    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        out: list[bytes | Oversized] = []
        while chunk:
            cut = chunk.find(b"\n")
            part, chunk = (chunk, b"") if cut < 0 else (chunk[:cut], chunk[cut + 1:])
            if not self.dropping:
                self.buffer += part
                if len(self.buffer) > self.limit:
                    out.append(Oversized(bytes(self.buffer[:ID_SCAN_BYTES])))
                    self.buffer.clear()
                    self.dropping = True
            if cut >= 0:
                out.extend(self.finish())
        return out

    def finish(self) -> list[bytes | Oversized]:
        """The line ended (its newline, or the end of stdin)."""
        line = bytes(self.buffer)
        self.buffer.clear()
        self.dropping = False
        return [line] if line.strip() else []


async def _stdin_lines(limit: int) -> AsyncIterator[bytes | Oversized]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    lines = Lines(limit)
    while chunk := await reader.read(READ_BYTES):
        for line in lines.feed(chunk):
            yield line
    for line in lines.finish():
        yield line


async def deliver(door: DoorClient, line: bytes | Oversized, limit: int) -> None:
    """One line of stdin to the door: a line over ``limit`` is refused here, it never reaches the endpoint."""
    if isinstance(line, Oversized):
        door.write(too_large(line.prefix, limit))
    else:
        await door.handle_line(line)


async def serve_stdio(config: GatewayConfig, authorization: str | None,
                      upstream: UpstreamSetup | None = None) -> None:
    """``upstream``: the user's login and extra headers for the upstream (gateway.ops.stdio_login)."""
    upstream = upstream or UpstreamSetup()
    app = create_app(config, credentials=upstream.login, upstream_headers=upstream.headers)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        with tempfile.TemporaryDirectory(prefix="mcp-gateway-stdio-") as folder:
            path = f"{folder}/gateway.sock"
            await web.UnixSite(runner, path).start()
            print(banner(config), file=sys.stderr, flush=True)  # stdout is the client's: JSON-RPC only
            async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path),
                                             timeout=DOOR_HOP_TIMEOUT) as http:
                door = DoorClient(http, authorization, sys.stdout.buffer,
                                  door=runner.app[GATEWAY].door_headers(Transport.STDIO))
                limit = config.connections.max_request_bytes
                try:
                    async for line in _stdin_lines(limit):
                        await deliver(door, line, limit)
                finally:
                    await door.close()
    finally:
        await runner.cleanup()


def banner(config: GatewayConfig) -> str:
    """The one line the door prints on stderr once it serves (a desktop client shows it in its server log)."""
    usage = (os.path.abspath(config.usage.db) if config.usage.db else "memory") if config.usage.enabled else "off"
    return (f"gateway stdio: one 2025-11-25 session on stdin/stdout; upstream: "
            f"{config.upstream_url or 'the embedded core'}; usage database: {usage}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream", default=None, help="2026-07-28 server URL (default: the embedded core)")
    parser.add_argument("--config", default=None, help="TOML config file (see config/gateway.example.toml)")
    parser.add_argument("--token-env", default=None, metavar="VAR",
                        help="the environment variable holding the bearer token for the upstream (never a flag)")
    parser.add_argument("--usage-db", default=None,
                        help="usage store (default [gateway.usage].db, else gateway-usage.sqlite3 here)")
    parser.add_argument("--print-config", default=None, metavar="NAME",
                        help="print the desktop client's JSON entry NAME that launches this command with these "
                             "flags (absolute paths), and exit")
    add_login_arguments(parser)


def desktop_config(name: str, args: argparse.Namespace, config: GatewayConfig) -> str:
    """``{"mcpServers": {NAME: {"command": ..., "args": [...]}}}`` launching ``stdio`` as asked, by absolute
    paths: this Python (its virtual environment's, not resolved through the link) with ``-m gateway``."""
    argv = ["-m", "gateway", "stdio"]
    if args.upstream:
        argv += ["--upstream", args.upstream]
    if args.config:
        argv += ["--config", os.path.abspath(args.config)]
    if args.token_env:
        argv += ["--token-env", args.token_env]
    if config.usage.enabled and config.usage.db:
        argv += ["--usage-db", os.path.abspath(config.usage.db)]
    argv += login_argv(args)
    entry = {"command": os.path.abspath(sys.executable), "args": argv}
    return json.dumps({"mcpServers": {name: entry}}, indent=2)
