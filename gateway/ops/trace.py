"""``serve --trace FILE [--trace-content]`` (attaching a :class:`~gateway.telemetry.trace.Tracer` to the app),
``serve --otel`` (the OpenTelemetry SDK's provider and OTLP exporter, for gateway.telemetry.otel's spans) and
``python -m gateway trace FILE [--request ID] [--html OUT]`` (reading one back: kit.trace_view)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.config.settings import GatewayConfig, OtelConfig, TraceConfig
from gateway.http.app import create_app
from gateway.telemetry.trace import Tracer
from kit.trace_view import group, html_page, summary


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--trace", default=None, metavar="FILE",
                       help="write a translation trace (JSON Lines) here (overrides [gateway.trace].file)")
    serve.add_argument("--trace-content", action="store_true",
                       help="keep arguments, sampling/elicitation content and results in the trace")
    serve.add_argument("--otel", action="store_true",
                       help="export OpenTelemetry spans over OTLP, set up by the OTEL_* environment variables "
                            "(needs the otel extra; overrides [gateway.otel].enabled)")


def with_otel(config: GatewayConfig, flag: bool) -> GatewayConfig:
    """``--otel`` over the file's ``[gateway.otel] enabled``."""
    if not flag:
        return config
    return config.model_copy(update={"otel": OtelConfig(enabled=True)})


def otel_exporting(app: web.Application, config: GatewayConfig) -> str | None:
    """With spans on: the SDK's provider and OTLP exporter installed (flushed when the app ends); where spans go.
    Without the ``otel`` extra, start-up ends with the one line saying what to install."""
    if not config.otel.enabled:
        return None
    try:
        from gateway.telemetry.otel import install_provider, shutdown_provider

        target = install_provider()
    except ImportError as exc:
        raise SystemExit(f"gateway: OpenTelemetry spans need the otel extra "
                         f"(pip install 'mcp-legacy-gateway[otel]'): {exc}") from None

    async def flush(_app: web.Application) -> None:
        shutdown_provider()
    app.on_cleanup.append(flush)
    return target


def with_trace(config: GatewayConfig, file: str | None, content: bool) -> GatewayConfig:
    """The ``--trace``/``--trace-content`` flags over the file's ``[gateway.trace]``."""
    update: dict[str, Any] = {"file": file} if file else {}
    if content:
        update["content"] = True
    if not update:
        return config
    trace = TraceConfig.model_validate({**config.trace.model_dump(), **update})
    return config.model_copy(update={"trace": trace})


def traced_app(config: GatewayConfig) -> web.Application:
    """``create_app`` with the configured trace as its tap (none without ``[gateway.trace] file``); the trace's
    last records are written when the app shuts down. A file that cannot be written ends start-up in one line."""
    if config.trace.file is None:
        return create_app(config)
    try:
        tracer = Tracer(config.trace.file, max_bytes=config.trace.max_bytes, content=config.trace.content,
                        enabled=config.trace.enabled)
    except OSError as exc:  # start-up ends: serving on without the trace asked for would hide it
        raise SystemExit(f"gateway: trace file {config.trace.file} (--trace or [gateway.trace] file): cannot write "
                         f"it: {exc.strerror or exc}") from None
    app = create_app(config, tap=tracer)

    async def close(_app: web.Application) -> None:
        tracer.close()
    app.on_cleanup.append(close)
    return app


def add_arguments(trace: argparse.ArgumentParser) -> None:
    trace.add_argument("file", help="a trace written by `serve --trace FILE`")
    trace.add_argument("--request", default=None, metavar="ID",
                       help="only this legacy request: its correlation id (SESSION/ID) or its JSON-RPC id")
    trace.add_argument("--html", default=None, metavar="OUT", help="also write a page of sequence diagrams here")


def glue_request_ids(argv: list[str]) -> list[str]:
    """``--request ID`` as ``--request=ID``: a correlation id starts with its session id, which is URL-safe base64
    (one in 64 begins with "-"), and argparse takes a separate value that begins with "-" for an option."""
    out, values = [], iter(argv)
    for arg in values:
        value = next(values, None) if arg == "--request" else None
        out.append(arg if value is None else f"{arg}={value}")
    return out


def read_records(path: str) -> list[dict[str, Any]]:
    """The records of a trace file; a line cut short by a crash is skipped."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "corr" in record:
            records.append(record)
    return records


def run(args: argparse.Namespace) -> int:
    try:
        requests = group(read_records(args.file), args.request)
    except OSError as exc:
        print(f"gateway trace: {exc}", file=sys.stderr)
        return 2
    print(summary(requests), end="")
    if args.html:
        Path(args.html).write_text(html_page(requests, f"trace {Path(args.file).name}"), encoding="utf-8")
    return 0 if requests else 1
