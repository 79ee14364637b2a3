"""The command line: ``python -m gateway serve | check-config FILE | reload --pid PID | report | check | replay``.

``serve [--host 127.0.0.1] [--port 8808] [--upstream URL] [--config FILE] [--pid-file F] [--store URL]
[--require-upstream] [--workspace DIR]`` runs the gateway (with the embedded core unless ``--upstream`` is
given, on the in-memory session store unless ``--store`` names a Redis; an upstream is probed first,
gateway.ops.probe); with ``--config`` it reloads that file on SIGHUP.
``check-config FILE`` validates a file without serving (exit 2 and the key path on failure).
``reload --pid PID | --pid-file F`` asks a running gateway to re-read its file.
``trace FILE [--request ID] [--html OUT]`` summarizes a ``serve --trace FILE`` trace per legacy request.
``check --upstream URL`` plays a 2025-11-25 client through an in-process gateway, tool by tool (gateway.ops.check).
``replay FILE... --upstream URL`` replays scenario files of legacy client steps the same way (gateway.ops.replay).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from datetime import date
from pathlib import Path

from aiohttp import web
from pydantic import ValidationError
from yarl import URL

from adapters.authz import UpstreamProtection
from adapters.probe import Verdict
from gateway.config.settings import AuthConfig, ConfigError, GatewayConfig, StoreConfig, load_config
from gateway.ops.check import add_arguments as add_check_arguments
from gateway.ops.check import run as run_check
from gateway.ops.connections import listen_refusal
from gateway.ops.connections import run as run_capped
from gateway.ops.files import FileRefused, make_folder, make_folders, write_pid_file
from gateway.ops.flags import refuse_upstream
from gateway.ops.logs import RedactingAccessLogger
from gateway.ops.logs import install as install_log_filter
from gateway.ops.loops import CHOICES, install, tune_gc
from gateway.ops.probe import Target
from gateway.ops.replay import add_arguments as add_replay_arguments
from gateway.ops.replay import run as run_replay
from gateway.ops.stdio import add_arguments as add_stdio_arguments
from gateway.ops.trace import add_arguments as add_trace_arguments
from gateway.ops.trace import add_serve_arguments as add_serve_trace_arguments
from gateway.ops.trace import glue_request_ids, otel_exporting, traced_app, with_otel, with_trace
from gateway.ops.trace import run as run_trace
from gateway.session.runtime import DRAIN_FRACTION
from gateway.telemetry.report import add_arguments as add_report_arguments
from gateway.telemetry.report import run as run_report
from gateway.telemetry.usage import serve_defaults as usage_serve_defaults
from gateway.upstream.embedded import shared_key_refusal


def port_flag(text: str) -> int:
    """``--port`` checked as argparse parses it, so the error blames the flag (not the configuration)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535; 0 picks a free one)")
    return port


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m gateway", description="MCP 2025-11-25 -> 2026-07-28 gateway")
    commands = root.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the legacy endpoint at http://HOST:PORT/mcp")
    serve.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=port_flag, default=None, help="listen port (default 8808)")
    serve.add_argument("--upstream", default=None, help="2026-07-28 server URL (default: the embedded core)")
    serve.add_argument("--config", default=None, help="TOML config file (see config/gateway.example.toml)")
    serve.add_argument("--upstream-era", choices=("auto", "2026-07-28", "2025-11-25"), default=None,
                       help="the upstream's era (default auto: the start-up probe decides; a 2025-11-25 server is "
                            "served to 2026-07-28 clients in reverse)")
    serve.add_argument("--no-access-log", action="store_true", help="do not log every request (benchmarks)")
    serve.add_argument("--workers", type=int, default=1, metavar="N",
                       help="N processes on one port (SO_REUSEPORT); needs a shared --store (default 1)")
    serve.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set for each worker
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info",
                       help="the least severe log records shown (default info: the banner and every request)")
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
    serve.add_argument("--workspace", default=None, metavar="DIR",
                       help="a folder the embedded core lets anonymous clients scan (default: the current "
                            "directory; [gateway] embedded_workspace)")
    serve.add_argument("--require-upstream", action="store_true",
                       help="exit non-zero when the start-up probe finds no 2026-07-28 server at the upstream or "
                            "at any named upstream (default: log what it found and serve anyway; an upstream may "
                            "come up later)")
    add_serve_trace_arguments(serve)
    check = commands.add_parser("check-config", help="validate a configuration file without serving")
    check.add_argument("file")
    reload = commands.add_parser("reload", help="make a running gateway re-read its configuration file")
    target = reload.add_mutually_exclusive_group(required=True)
    target.add_argument("--pid", type=int)
    target.add_argument("--pid-file")
    reload.add_argument("--config", default=None, metavar="FILE",
                        help="the file the gateway serves: validated first, and no signal is sent if the "
                             "gateway would refuse it")
    add_report_arguments(commands.add_parser("report", help="the migration report from the usage store"))
    add_check_arguments(commands.add_parser("check", help="play a 2025-11-25 client through the gateway, tool by tool"))
    add_stdio_arguments(commands.add_parser("stdio", help="serve one legacy session on stdin/stdout (for desktop "
                                                          "clients)"))
    add_replay_arguments(commands.add_parser("replay", help="replay scenario files of 2025-11-25 client steps"))
    add_trace_arguments(commands.add_parser("trace", help="summarize a translation trace per legacy request"))
    return root


def check_config(path: str) -> int:
    try:
        config = load_config(path)
    except ConfigError as exc:
        if _is_core_config(path):
            print(f"invalid: {path}: this is a core configuration: use `python -m modern_server check-config "
                  f"{path}` (the gateway points at one with [gateway] core_config)", file=sys.stderr)
        else:
            print(f"invalid: {exc}", file=sys.stderr)
        return 2
    peers = ", ".join(p.name for p in config.pins.peers) or "(none)"
    print(f"ok: {path}: peers {peers}; default peer {config.pins.default_peer.name}; "
          f"upstreams {', '.join(config.pins.upstreams) or '(default only)'}")
    for peer in (*config.pins.peers, config.pins.default_peer):  # valid, but probably not what was meant
        if peer.sunset is not None and peer.sunset < date.today():
            print(f"warning: peer {peer.name!r}: its sunset {peer.sunset} has passed: its clients' legacy "
                  "revisions are refused now", file=sys.stderr)
    return 0


def _is_core_config(path: str) -> bool:
    """Whether ``path`` is a valid configuration of the reference core (the embedded one's, ``core_config``),
    the usual wrong file to hand ``check-config``."""
    from modern_server.config import ConfigError as CoreConfigError
    from modern_server.config import load_config as load_core_config

    try:
        load_core_config(path)
    except (CoreConfigError, ValueError):
        return False
    return True


def send_reload(pid: int | None, pid_file: str | None, config: str | None = None) -> int:
    """SIGHUP to the gateway, only when it serves ``config`` (when given) and the file it serves passes the checks
    the gateway will make (gateway.ops.reload.refusal)."""
    from gateway.ops.reload import refusal, served_by

    target = pid if pid is not None else _read_pid(pid_file or "")
    if (refused := refusal(target, config)) is not None:
        print(refused, file=sys.stderr)
        return 2
    config = config or served_by(target).config
    if config is not None:
        try:
            load_config(config)
        except ConfigError as exc:
            print(f"reload: not sent, the gateway would refuse the file: {exc}", file=sys.stderr)
            return 2
    try:
        os.kill(target, signal.SIGHUP)
    except ProcessLookupError:
        raise SystemExit(f"reload: no process {target}" + (f" (stale pid file {pid_file}?)" if pid_file else "")) \
            from None
    except PermissionError:
        raise SystemExit(f"reload: not allowed to signal process {target}") from None
    print(f"sent SIGHUP to {target}")
    return 0


def _read_pid(pid_file: str) -> int:
    try:
        text = Path(pid_file).read_text().strip()
    except OSError as exc:
        raise SystemExit(f"reload: cannot read pid file {pid_file}: {exc.strerror or exc}") from None
    if not text.isdigit():
        raise SystemExit(f"reload: pid file {pid_file} does not hold a process id (it holds {text[:40]!r})")
    return int(text)


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    return {"host": args.host, "port": args.port, "upstream_url": args.upstream,
            "embedded_workspace": args.workspace, "upstream_era": getattr(args, "upstream_era", None),
            "upstream_eras": getattr(args, "upstream_eras", None)}


def configured(args: argparse.Namespace) -> GatewayConfig:
    """``serve``'s configuration (file, then flags), or exit with the file, key path and problem."""
    try:
        return load_config(args.config, **_overrides(args))
    except ConfigError as exc:
        raise SystemExit(f"gateway: {exc}") from None


def served_app(args: argparse.Namespace,
               upstream: UpstreamProtection | None = None) -> tuple[web.Application, GatewayConfig]:
    """The app ``serve`` runs, with everything its flags add (reload, pid file, GC tuning), and its config;
    ``upstream``: the default upstream's protection, which the doors then copy (:func:`protected_like`)."""
    from gateway.ops.reload import install_sighup

    overrides = _overrides(args)
    config = usage_serve_defaults(protected_like(configured(args), upstream), args.usage_db)
    if config.embedded_workspace is None:  # serve's demo: the user's own folder is a workspace of the core
        config = config.model_copy(update={"embedded_workspace": os.getcwd()})
    config = with_otel(with_trace(with_store(config, args.store), args.trace, args.trace_content), args.otel)
    written_folders(args, config)
    app = traced_app(config)  # create_app, with the trace as its tap when one is configured
    exporting = otel_exporting(app, config)
    if exporting is not None:
        logging.getLogger("gateway").info("OpenTelemetry spans: exported over OTLP to %s", exporting)
    if args.config:
        install_sighup(app, args.config, **overrides)
    if args.pid_file:
        try:
            write_pid_file(args.pid_file)
        except FileRefused as exc:
            raise SystemExit(f"gateway: {exc}") from None

    async def tuned(_app: web.Application) -> None:  # a start-up hook: after the embedded core and stores started
        tune_gc(args.gc_gen0)
    app.on_startup.append(tuned)
    return app, config


def written_folders(args: argparse.Namespace, config: GatewayConfig) -> None:
    """The folders of every file ``serve`` writes, made before serving, or start-up ends with one line."""
    try:
        make_folders([("--pid-file", args.pid_file), ("usage database (--usage-db)", config.usage.db),
                      ("trace file (--trace)", config.trace.file)])
        make_folder("state_dir", config.state_dir)
    except FileRefused as exc:
        raise SystemExit(f"gateway: {exc}") from None


def with_store(config: GatewayConfig, url: str | None) -> GatewayConfig:
    """``--store URL`` replaces the file's ``[gateway.store] url`` only: its prefix and timeout still apply."""
    if url is None:
        return config
    try:
        store = StoreConfig.model_validate({**config.store.model_dump(), "url": url})
    except ValidationError as exc:
        raise SystemExit(f"gateway: --store: {exc.errors()[0]['msg']}") from None
    return config.model_copy(update={"store": store})


def check_upstream(config: GatewayConfig, required: bool) -> tuple[UpstreamProtection | None, str | None,
                                                                  dict[str, str]]:
    """The start-up probe (gateway.ops.probe): one line per upstream (the default one and each named one) saying
    what is there; with ``required``, any that is not a 2026-07-28 server ends start-up with its line (a 2025-era
    upstream served in reverse is fine). Returns what the default upstream's protected-resource metadata says,
    when it answered 401 with one; its era, and each named upstream's, where "auto" found a 2025-era server
    (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge)."""
    from adapters.probe import UpstreamKind
    from adapters.reverse_wire import Era, era_of
    from gateway.ops.probe import probe_all, targets

    found = targets(config, os.environ)
    if not found:
        return None, None, {}  # only the embedded core: nothing to probe
    verdicts = asyncio.run(probe_all(found, min(config.upstream_connect_timeout_seconds, 5.0)))
    configured: dict[str | None, str] = {None: config.upstream_era,
                                         **{n: u.era for n, u in config.pins.upstreams.items()}}
    reverse = {t.name for t, v in verdicts
               if v.kind is UpstreamKind.LEGACY and era_of(configured[t.name], v.kind) is Era.LEGACY}
    for name in reverse:
        logging.getLogger("gateway").info("upstream %s: a 2025-era server, served to 2026-07-28 clients in reverse",
                                          config.upstream_url if name is None else repr(name))
    failed = [target.line(verdict) for target, verdict in verdicts
              if verdict.kind is not UpstreamKind.MODERN and target.name not in reverse]
    if required and failed:
        raise SystemExit(f"gateway: {'; '.join(failed)} (--require-upstream)")
    for target, verdict in verdicts:
        if verdict.kind is UpstreamKind.MODERN or target.name in reverse:
            logging.getLogger("gateway").info("%s", target.line(verdict))
        else:
            logging.getLogger("gateway").warning("%s; serving anyway", target.line(verdict))
    refused = [problem for target, verdict in verdicts if (problem := _forward_problem(config, target, verdict))]
    if refused:
        raise SystemExit(f"gateway: {'; '.join(refused)}")
    protection = next((v.protection for t, v in verdicts if t.name is None and v.protection is not None), None)
    named = {name: Era.LEGACY.value for name in reverse if name is not None}
    return protection, (Era.LEGACY.value if None in reverse else None), named


def _forward_problem(config: GatewayConfig, target: Target, verdict: Verdict) -> str | None:
    """An upstream configured to get the client's token (``forward``) whose metadata names another resource."""
    from adapters.credentials import forward_refusal

    auth = config.upstream_auth.auth if target.name is None else config.pins.upstreams[target.name].auth
    if auth != "forward" or verdict.protection is None:
        return None
    base = config.public_base()
    own = [base + door for door in ("/mcp", "/sse", "/ws")] if base else []
    where = "gateway.upstream_auth" if target.name is None else f"upstreams.{target.name}"
    return forward_refusal(where, verdict.protection.resource, own)


def protected_like(config: GatewayConfig, upstream: UpstreamProtection | None) -> GatewayConfig:
    """``--upstream`` alone in front of an OAuth-protected server: the doors are protected the same way at once
    (tokens of the upstream's authorization servers), so clients authorize at the gateway and the upstream gets
    the gateway's own credential, never theirs. A configured ``[gateway.auth]`` is kept as it is."""
    if upstream is None or config.auth.enabled:
        return config
    auth = AuthConfig(authorization_servers=upstream.authorization_servers,
                      scopes_supported=upstream.scopes_supported)
    try:
        protected = GatewayConfig.model_validate({**config.model_dump(), "auth": auth.model_dump()})
    except ValidationError as exc:
        raise SystemExit(f"gateway: the upstream is OAuth-protected: {exc.errors()[0]['msg']}") from None
    logging.getLogger("gateway").info("doors protected like the upstream: tokens of %s are required",
                                      ", ".join(upstream.authorization_servers))
    return protected


def serve(args: argparse.Namespace) -> None:
    config = configured(args)
    if args.workers > 1:
        from gateway.ops.workers import refusal, supervise

        problem = refusal(with_store(config, args.store), args.workers)
        if problem is not None:
            raise SystemExit(f"gateway: {problem}")
        if args.pid_file:  # the parent's: SIGHUP to it reaches every worker (`reload --pid-file`)
            try:
                make_folders([("--pid-file", args.pid_file)])
                write_pid_file(args.pid_file)
            except FileRefused as exc:
                raise SystemExit(f"gateway: {exc}") from None
        try:
            raise SystemExit(supervise(args.serve_argv, args.workers))
        finally:
            _remove_pid_file(args.pid_file)
    if args.reuse_port:  # a worker of serve --workers
        from gateway.ops.workers import die_with_parent

        die_with_parent(os.environ)
    protection, era, eras = check_upstream(config, args.require_upstream)
    if era is not None:
        args.upstream_era = era  # "auto", decided by the probe: the app and every reload serve it in reverse
    args.upstream_eras = eras  # the same for each named upstream whose era is "auto"
    app, config = served_app(args, protection)
    unshared = asyncio.run(shared_key_refusal(config, os.environ))  # before anything is served
    if unshared is not None:
        raise SystemExit(f"gateway: {unshared}")
    access_log = None if args.no_access_log else logging.getLogger("aiohttp.access")
    logging.getLogger().setLevel(args.log_level.upper())
    logging.getLogger("gateway").info("event loop: %s", install(args.loop))
    install_log_filter(config.connections.log_repeat_interval_seconds)

    def bound(port: int) -> None:  # the banner only once the socket is bound: never before "cannot listen"
        logging.getLogger("gateway").info("%s", banner(config.model_copy(update={"port": port})))
    try:
        # aiohttp's wait for open handlers comes after the drain (Gateway.drain): together, the configured timeout.
        run_capped(app, config, access_log=access_log, reuse_port=args.reuse_port,  # run_app, with the cap
                   access_log_class=RedactingAccessLogger,  # no SSE session id or admin token in the log
                   shutdown_timeout=config.shutdown_timeout_seconds * (1 - DRAIN_FRACTION), bound=bound)
    except OSError as exc:
        unbound = listen_refusal(exc, config.host, config.port)
        if unbound is None:
            raise
        raise SystemExit(f"gateway: {unbound}") from None
    finally:
        _remove_pid_file(args.pid_file)
    logging.getLogger("gateway").info("gateway stopped")


def _remove_pid_file(pid_file: str | None) -> None:
    """A pid file names this process only while it runs; one another process has since written stays."""
    if pid_file is None:
        return
    path = Path(pid_file)
    with contextlib.suppress(OSError):
        if path.read_text().strip() == str(os.getpid()):
            path.unlink()


def run_stdio(args: argparse.Namespace) -> int:
    """``stdio``: stdout carries only JSON-RPC, so every log line goes to stderr (logging's default stream)."""
    from gateway.ops.stdio import desktop_config, serve_stdio
    from gateway.ops.stdio_login import upstream_setup

    try:
        config = usage_serve_defaults(load_config(args.config, upstream_url=args.upstream), args.usage_db)
    except ConfigError as exc:
        print(f"gateway stdio: {exc}", file=sys.stderr)
        return 2
    if args.print_config is not None:
        print(desktop_config(args.print_config, args, config))
        return 0
    token = os.environ.get(args.token_env) if args.token_env else None
    if args.token_env and not token:
        print(f"gateway stdio: the environment variable {args.token_env} is not set", file=sys.stderr)
        return 2
    upstream = upstream_setup(args, config)
    if isinstance(upstream, str):
        print(f"gateway stdio: {upstream}", file=sys.stderr)
        return 2
    unshared = asyncio.run(shared_key_refusal(config, os.environ))  # the embedded core's key, as serve checks it
    if unshared is not None:
        print(f"gateway stdio: {unshared}", file=sys.stderr)
        return 2
    asyncio.run(serve_stdio(config, f"Bearer {token}" if token else None, upstream))
    return 0


def banner(config: GatewayConfig) -> str:
    """One line saying what this process serves: where, in front of what, and where it keeps its records."""
    upstream = config.upstream_url or "the embedded core"
    usage = config.usage.db or "memory" if config.usage.enabled else "off"
    dashboard = "enabled" if os.environ.get(config.usage.admin_token_env) else \
        f"disabled (set {config.usage.admin_token_env})"
    return (f"serving legacy MCP at {config.public_base() or f'http://{config.host}:{config.port}'}/mcp; "
            f"upstream: {upstream}; session store: {store_name(config.store.url)}; usage database: {usage}; "
            f"/migration {dashboard}")


def store_name(url: str | None) -> str:
    """The session store as the banner names it: ``memory``, or the Redis URL without its password."""
    if not url:
        return "memory"
    parsed = URL(url)
    return str(parsed.with_password(None)) if parsed.password else url


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(glue_request_ids(argv))
    args.serve_argv = argv[1:]  # what a worker is started with
    refusal = refuse_upstream(f"gateway {args.command}", getattr(args, "upstream", None))
    if refusal is not None:  # before the probe, the banner or a worker: nothing else is printed
        print(refusal, file=sys.stderr)
        raise SystemExit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.command == "check-config":
        raise SystemExit(check_config(args.file))
    if args.command == "check":
        raise SystemExit(run_check(args))
    if args.command == "stdio":
        raise SystemExit(run_stdio(args))
    if args.command == "replay":
        raise SystemExit(run_replay(args))
    if args.command == "report":
        raise SystemExit(run_report(args))
    if args.command == "trace":
        raise SystemExit(run_trace(args))
    if args.command == "reload":
        raise SystemExit(send_reload(args.pid, args.pid_file, args.config))
    serve(args)
