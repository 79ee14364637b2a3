"""``python -m gateway check``, the shell half: plays a scripted 2025-11-25 client through an in-process gateway
against a 2026-07-28 server, tool by tool.

Owns the I/O of a check: the direct 2026 probe of the upstream (``server/discover``, ``tools/list``), then the
legacy session of :mod:`gateway.ops.legacy_client` through an in-process gateway, answering every live request
with the canned answers of :mod:`adapters.check`, which also judges what it saw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from adapters import check as C
from adapters.capabilities import client_caps_to_modern
from adapters.upstream import SessionView, build_request
from gateway.config.settings import TraceConfig
from gateway.ops.legacy_client import ACCEPT, MAX_PAGES, LegacyClient, Rounds, Unusable, served_gateway


@dataclass(frozen=True, slots=True)
class Options:
    upstream: str
    token: str | None = None
    tools: tuple[str, ...] = ()  # empty: every tool
    arguments: Mapping[str, Any] = field(default_factory=dict)
    roots: tuple[str, ...] = ()
    timeout: float = 60.0
    trace: TraceConfig | None = None  # --trace FILE [--trace-content]: the run's translation trace

    @property
    def authorization(self) -> str | None:
        return f"Bearer {self.token}" if self.token else None


# --- the direct 2026-07-28 probe ----------------------------------------------------------------------------
async def _post_modern(http: aiohttp.ClientSession, opts: Options, method: str,
                       params: Mapping[str, Any], ident: int) -> tuple[int, Any, str]:
    view = SessionView(client_caps_to_modern(C.CLIENT_CAPABILITIES), C.CLIENT_INFO, authorization=opts.authorization)
    call = build_request(method, params, request_id=ident, view=view)
    async with http.post(opts.upstream, data=json.dumps(call.body), headers=call.headers) as resp:
        text = await resp.text()
    return resp.status, _last_message(text), text


def _last_message(text: str) -> Any:
    """The JSON body, or the last ``data:`` event of an SSE body (the response comes last)."""
    try:
        return json.loads(text)
    except ValueError:
        events = [line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
        try:
            return json.loads(events[-1]) if events else None
        except ValueError:
            return None


async def probe(http: aiohttp.ClientSession, opts: Options) -> tuple[C.ServerVerdict, list[dict[str, Any]]]:
    """The verdict on the upstream and its tools as a 2026 client sees them (all pages)."""
    try:
        status, message, text = await _post_modern(http, opts, "server/discover", {}, 1)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise Unusable(f"cannot reach {opts.upstream}: {exc or type(exc).__name__}") from None
    legacy = None
    if not (isinstance(message, Mapping) and "result" in message):
        legacy = await _legacy_version(http, opts)
    verdict = C.judge_server(status, message, text, legacy)
    if not verdict.modern:
        raise Unusable(verdict.description)
    tools: list[dict[str, Any]] = []
    cursor = None
    for page in range(MAX_PAGES):
        params: dict[str, Any] = {"cursor": cursor} if cursor else {}
        _status, message, _text = await _post_modern(http, opts, "tools/list", params, 2 + page)
        result = message.get("result", {}) if isinstance(message, Mapping) else {}
        tools.extend(result.get("tools") or [])
        if not (cursor := result.get("nextCursor")):
            break
    return verdict, tools


async def _legacy_version(http: aiohttp.ClientSession, opts: Options) -> str | None:
    """What a 2025 ``initialize`` negotiates there (None when it fails too); its session is deleted at once."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": C.LEGACY, "capabilities": {}, "clientInfo": C.CLIENT_INFO}}
    headers = {"Accept": ACCEPT, "Content-Type": "application/json", **_auth(opts)}
    try:
        async with http.post(opts.upstream, data=json.dumps(body), headers=headers) as resp:
            message, session = _last_message(await resp.text()), resp.headers.get("Mcp-Session-Id")
        if session:
            async with http.delete(opts.upstream, headers={**headers, "Mcp-Session-Id": session}):
                pass
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None
    result = message.get("result") if isinstance(message, Mapping) else None
    return result.get("protocolVersion") if isinstance(result, Mapping) else None


def _auth(opts: Options) -> dict[str, str]:
    return {"Authorization": opts.authorization} if opts.authorization else {}


# --- the run ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: C.ServerVerdict
    reports: tuple[C.ToolReport, ...]
    notes: tuple[str, ...] = ()  # gateway-level findings (initialize, the lists)


async def run_check(opts: Options) -> Outcome:
    """Raises :class:`Unusable` when the upstream cannot be checked."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        verdict, upstream_tools = await probe(http, opts)
        rounds = Rounds()
        async with served_gateway(opts.upstream, rounds, opts.trace) as url:
            client = LegacyClient(http, url, _canned(opts), opts.authorization)
            try:
                notes, legacy_tools = await _session_checks(client)
                reports = await _tool_reports(client, opts, rounds, upstream_tools, legacy_tools)
            finally:
                await client.close()
    return Outcome(verdict, reports, notes)


def _canned(opts: Options) -> Callable[[str, Mapping[str, Any]], dict[str, Any] | None]:
    return lambda method, params: C.canned_answer(method, params, opts.roots)


async def _session_checks(client: LegacyClient) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    notes = []
    init = await client.initialize()
    if error := C.legacy_schema_error("initialize", init):
        notes.append(f"initialize result breaks the 2025-11-25 schema: {error}")
    tools = await client.list_all("tools/list", "tools")
    if error := C.legacy_schema_error("tools/list", {"tools": tools}):
        notes.append(f"tools/list breaks the 2025-11-25 schema: {error}")
    capabilities = init.get("capabilities") or {}
    for method, key, cap in (("prompts/list", "prompts", "prompts"), ("resources/list", "resources", "resources")):
        if cap in capabilities:
            items = await client.list_all(method, key)
            if error := C.legacy_schema_error(method, {key: items}):
                notes.append(f"{method} breaks the 2025-11-25 schema: {error}")
    return tuple(notes), tools


async def _tool_reports(client: LegacyClient, opts: Options, rounds: Rounds,
                        upstream_tools: Sequence[Mapping[str, Any]],
                        legacy_tools: Sequence[Mapping[str, Any]]) -> tuple[C.ToolReport, ...]:
    listed = C.listing_problems(upstream_tools, legacy_tools)
    by_name: dict[Any, Mapping[str, Any]] = {t.get("name"): t for t in upstream_tools}  # names as listed: unchecked
    names = list(opts.tools) or list(by_name)
    reports = []
    for name in names:
        problems = listed.get(name, ())
        if name not in by_name:
            reports.append(C.ToolReport(name, C.Status.FAILED, error="not in the server's tools/list"))
        elif any(p.kind is C.ProblemKind.DROPPED for p in problems):
            reports.append(C.dropped_report(name, problems))
        else:
            reports.append(await _call_one(client, opts, rounds, by_name[name], problems))
    return tuple(reports)


async def _call_one(client: LegacyClient, opts: Options, rounds: Rounds, tool: Mapping[str, Any],
                    listed: tuple[C.Problem, ...]) -> C.ToolReport:
    name = tool["name"]
    arguments = opts.arguments.get(name)
    if arguments is None:
        arguments = C.synthesize_arguments(tool.get("inputSchema"))
    if isinstance(arguments, C.Skip):
        return C.ToolReport(name, C.Status.SKIPPED, problems=listed, error=arguments.reason)
    rounds.count = 0
    inputs: list[C.InputKind] = []
    try:
        async with asyncio.timeout(opts.timeout):
            message = await client.request("tools/call", {"name": name, "arguments": arguments}, inputs)
    except TimeoutError:
        await client.cancel("python -m gateway check: no answer in time")
        return C.judge(C.Observation(name, tuple(inputs), rounds.count, timed_out=True), listed)
    observed = C.Observation(name, tuple(inputs), rounds.count, message.get("result"), message.get("error"))
    return C.judge(observed, listed)


# --- the command line ---------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream", required=True, help="the 2026-07-28 server's URL")
    parser.add_argument("--token-env", metavar="VAR", help="send 'Authorization: Bearer $VAR' (upstream and gateway)")
    parser.add_argument("--tools", help="comma-separated tool names (default: every tool)")
    parser.add_argument("--args", metavar="FILE", help="JSON or TOML file: tool name -> arguments")
    parser.add_argument("--roots", help="comma-separated root URIs for roots/list (default: the current directory)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per tool call (default 60)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--trace", metavar="FILE", help="write the run's translation trace here (JSON Lines, as "
                        "`serve --trace`; `python -m gateway trace FILE` renders it)")
    parser.add_argument("--trace-content", action="store_true",
                        help="keep arguments, sampling/elicitation content and results in the trace")


def options(args: argparse.Namespace) -> Options:
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise Unusable(f"environment variable {args.token_env} is not set")
    roots = _split(args.roots) or (Path.cwd().resolve().as_uri(),)
    trace = TraceConfig(file=_writable(args.trace), content=args.trace_content) if args.trace else None
    return Options(args.upstream, token, _split(args.tools), load_arguments(args.args), roots, args.timeout, trace)


def _writable(path: str) -> str:
    """``--trace FILE``, refused before the run when it cannot be written (the trace's writer is a thread)."""
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise Unusable(f"--trace {path}: {exc.strerror or exc}") from None
    return path


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def load_arguments(path: str | None) -> dict[str, Any]:
    """``--args``: TOML when the name ends in ``.toml``, else JSON; an object keyed by tool name."""
    if path is None:
        return {}
    try:
        raw = Path(path).read_bytes()
        data = tomllib.loads(raw.decode()) if path.endswith(".toml") else json.loads(raw)
    except (OSError, ValueError) as exc:
        raise Unusable(f"--args {path}: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise Unusable(f"--args {path}: expected an object of tool name -> arguments object")
    return data


def run(args: argparse.Namespace) -> int:
    """Exit 0 when no tool failed, 1 when one did, 2 when the server could not be checked."""
    try:
        outcome = asyncio.run(run_check(options(args)))
    except Unusable as exc:
        _print_unusable(args, str(exc))
        return 2
    server = {"url": args.upstream, "name": outcome.verdict.info.get("name"),
              "version": outcome.verdict.info.get("version"), "notes": list(outcome.notes)}
    if args.json:
        print(json.dumps({"server": server, "tools": [r.to_json() for r in outcome.reports],
                          "summary": C.summary(outcome.reports)}, indent=2))
    else:
        print(f"server: {args.upstream} ({outcome.verdict.description}) through the 2025-11-25 gateway")
        for note in outcome.notes:
            print(f"note: {note}")
        print(C.render_table(outcome.reports))
    return C.exit_code(outcome.reports)


def _print_unusable(args: argparse.Namespace, reason: str) -> None:
    if args.json:
        print(json.dumps({"server": {"url": args.upstream, "error": reason}, "tools": [],
                          "summary": C.summary(())}, indent=2))
    else:
        print(f"cannot check {args.upstream}: {reason}", file=sys.stderr)
