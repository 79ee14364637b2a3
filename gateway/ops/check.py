"""``python -m gateway check``, the shell half: plays a scripted 2025-11-25 client through an in-process gateway
against a 2026-07-28 server, tool by tool.

Owns the I/O of a check: the direct 2026 probe of the upstream (``server/discover``, ``tools/list``), then the
legacy session of :mod:`gateway.ops.legacy_client` through an in-process gateway, answering every live request
with the answers of ``--answers FILE`` (a scenario file, :mod:`kit.scenario`: each tool's first ``call``
step gives its arguments, answers and expectations) or else the canned answers of :mod:`kit.check`, which
also judges what it saw. One progress line per tool goes to stderr as it ends. An OAuth-protected upstream is
logged in to as the stdio door does it (gateway.ops.stdio_login: the same flags, the same token folder).

A URL elicitation the check accepts is only consent (2026-07-28 client §Elicitation): the server then waits for a
step out of band, at that URL, which no scripted client takes; the tool is skipped with that reason
:data:`OUT_OF_BAND_SECONDS` after it was asked, not at the end of the tool's whole timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socket
import sys
import tomllib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from adapters.capabilities import client_caps_to_modern
from adapters.jsonwire import loads
from adapters.sse import EventTooLarge, SseDecoder
from adapters.upstream import SessionView, build_request
from gateway.auth.credentials import CredentialError
from gateway.auth.login import UserLogin
from gateway.config.settings import ConfigError, TraceConfig, load_config
from gateway.ops.legacy_client import ACCEPT, MAX_PAGES, LegacyClient, Rounds, Unusable, served_gateway
from gateway.ops.stdio_login import UpstreamSetup, upstream_setup
from gateway.ops.stdio_login import add_arguments as add_login_arguments
from kit import check as C
from kit import scenario as S

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Options:
    upstream: str
    token: str | None = None
    tools: tuple[str, ...] = ()  # empty: every tool
    arguments: Mapping[str, Any] = field(default_factory=dict)
    roots: tuple[str, ...] = ()
    timeout: float = 60.0  # each request, and each tool call
    trace: TraceConfig | None = None  # --trace FILE [--trace-content]: the run's translation trace
    total_timeout: float = 900.0  # the whole run: tools not called by then are skipped
    answers: Mapping[str, S.Step] = field(default_factory=dict)  # --answers: each tool's first call step
    progress: Callable[[int, int, C.ToolReport, float], None] | None = None  # (index, of, report, seconds)
    login: UserLogin | None = None  # the stdio door's login (its flags, its token folder): the upstream's token
    headers: Mapping[str, str] = field(default_factory=dict)  # --header / --headers-file: every upstream request

    @property
    def authorization(self) -> str | None:
        return f"Bearer {self.token}" if self.token else None


# --- the direct 2026-07-28 probe ----------------------------------------------------------------------------
# The server under check is not trusted: it is never followed elsewhere (a redirect is an answer), and what it
# sends is bounded in time (connect, silence, each request, the whole run) and in size.
CONNECT_SECONDS = 10.0
READ_SECONDS = 30.0  # silence while reading one answer (bounded by --timeout too)
MAX_BODY_BYTES = 16 * 2**20  # a JSON answer read whole
MAX_EVENT_BYTES = 8 * 2**20  # one SSE event of an answer
MAX_TOOLS = 100  # tools called in one run; the rest are named in a note
OUT_OF_BAND_SECONDS = 5.0  # after a URL elicitation was asked: its out-of-band step is not waited for longer
_QUOTE = 4096  # the start of a body kept to quote in a verdict


def _request_timeout(opts: Options) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=opts.timeout, sock_connect=CONNECT_SECONDS,
                                 sock_read=min(READ_SECONDS, opts.timeout))


async def upstream_authorization(opts: Options) -> str | None:
    """What the upstream is sent: ``--token-env``'s token, else the user's login's (stored, refreshed, or
    obtained by the login flow now); a login that cannot be had makes the upstream uncheckable."""
    if opts.login is None:
        return opts.authorization
    try:
        return await opts.login.header(None)
    except CredentialError as exc:
        raise Unusable(f"no token for the upstream: {exc}") from None


async def _post_modern(http: aiohttp.ClientSession, opts: Options, method: str,
                       params: Mapping[str, Any], ident: int) -> tuple[int, Any, str]:
    """One 2026 request; with a login, an upstream 401 is retried once with a fresh token (as the gateway's
    upstream client does, gateway.auth.login)."""
    answer = await _post_once(http, opts, method, params, ident)
    if answer[0] == 401 and opts.login is not None:
        opts.login.forget(None)
        answer = await _post_once(http, opts, method, params, ident)
    return answer


async def _post_once(http: aiohttp.ClientSession, opts: Options, method: str,
                     params: Mapping[str, Any], ident: int) -> tuple[int, Any, str]:
    view = SessionView(client_caps_to_modern(C.CLIENT_CAPABILITIES), C.CLIENT_INFO,
                       authorization=await upstream_authorization(opts))
    call = build_request(method, params, request_id=ident, view=view)
    try:
        async with http.post(opts.upstream, data=json.dumps(call.body), headers={**opts.headers, **call.headers},
                             allow_redirects=False, timeout=_request_timeout(opts)) as resp:
            _refuse_redirect(opts, resp)
            message, text = await _read_answer(resp, method)
    except TimeoutError:
        raise Unusable(f"{method}: no complete answer in time (connect {CONNECT_SECONDS:g} s, silence "
                       f"{min(READ_SECONDS, opts.timeout):g} s, all {opts.timeout:g} s)") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise Unusable(unreachable(exc)) from None
    return resp.status, message, text


def unreachable(exc: BaseException) -> str:
    """Why a request did not reach the server, in the operator's words (the URL is said once, by the caller)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        cause = exc.os_error
        if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(cause, socket.gaierror):
            return f"cannot resolve the host {exc.host!r}"
        why = os.strerror(cause.errno) if cause.errno else (cause.strerror or str(cause))
        return f"cannot connect to {exc.host}:{exc.port}: {why.lower()}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without answering"
    return f"the request failed: {exc or type(exc).__name__}"


def _refuse_redirect(opts: Options, resp: aiohttp.ClientResponse) -> None:
    """A redirect is reported, never followed: following it would send the body (and the token) elsewhere."""
    if 300 <= resp.status < 400:
        location = resp.headers.get("Location", "(no Location)")[:200]
        raise Unusable(f"{opts.upstream} answered {resp.status} redirecting to {location!r}; check does not "
                       "follow redirects: give that URL with --upstream if it is the server")


async def _read_answer(resp: aiohttp.ClientResponse, method: str) -> tuple[Any, str]:
    """The JSON-RPC message of an answer (a JSON body, or the response event of an SSE body) and the start of
    the body; None when it holds none. Over a size bound: :class:`Unusable`."""
    if resp.content_type == "text/event-stream":
        return await _read_events(resp, method), ""
    body = bytearray()
    async for chunk in resp.content.iter_any():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise Unusable(f"{method}: the answer is larger than {MAX_BODY_BYTES} bytes")
    text = bytes(body[:_QUOTE]).decode("utf-8", errors="replace")
    try:
        return loads(bytes(body)), text
    except ValueError:
        return None, text


async def _read_events(resp: aiohttp.ClientResponse, method: str) -> Any:
    """The first response (a message with a result or an error) of an SSE body, else its last message."""
    decoder, last = SseDecoder(MAX_EVENT_BYTES), None
    try:
        async for chunk in resp.content.iter_any():
            for data in decoder.feed(chunk):
                try:
                    last = loads(data)
                except ValueError:
                    continue
                if isinstance(last, Mapping) and ("result" in last or "error" in last):
                    return last
    except EventTooLarge:
        raise Unusable(f"{method}: an SSE event of the answer is larger than {MAX_EVENT_BYTES} bytes") from None
    return last


async def probe(http: aiohttp.ClientSession, opts: Options) -> tuple[C.ServerVerdict, list[Mapping[str, Any]]]:
    """The verdict on the upstream and its tools as a 2026 client sees them (all pages)."""
    status, message, text = await _post_modern(http, opts, "server/discover", {}, 1)
    legacy = None
    if not (isinstance(message, Mapping) and "result" in message):
        legacy = await _legacy_version(http, opts)
    verdict = C.judge_server(status, message, text, legacy)
    if not verdict.modern:
        raise Unusable(verdict.description)
    tools: list[Mapping[str, Any]] = []
    cursor = None
    for page in range(MAX_PAGES):
        params: dict[str, Any] = {"cursor": cursor} if cursor else {}
        _status, message, _text = await _post_modern(http, opts, "tools/list", params, 2 + page)
        try:
            found, cursor = C.tools_page(message)
        except C.Malformed as exc:
            raise Unusable(str(exc)) from None
        tools.extend(found)
        if not cursor:
            break
    return verdict, tools


async def _legacy_version(http: aiohttp.ClientSession, opts: Options) -> str | None:
    """What a 2025 ``initialize`` negotiates there (None when it fails too); its session is deleted at once."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": C.LEGACY, "capabilities": {}, "clientInfo": C.CLIENT_INFO}}
    headers = {**opts.headers, "Accept": ACCEPT, "Content-Type": "application/json",
               **_auth(await upstream_authorization(opts))}
    timeout = _request_timeout(opts)
    try:
        async with http.post(opts.upstream, data=json.dumps(body), headers=headers, allow_redirects=False,
                             timeout=timeout) as resp:
            message, _text = await _read_answer(resp, "initialize")
            session = resp.headers.get("Mcp-Session-Id")
        if session:
            async with http.delete(opts.upstream, headers={**headers, "Mcp-Session-Id": session},
                                   allow_redirects=False, timeout=timeout):
                pass
    except (aiohttp.ClientError, OSError, TimeoutError, Unusable):
        return None
    result = message.get("result") if isinstance(message, Mapping) else None
    version = result.get("protocolVersion") if isinstance(result, Mapping) else None
    return version if isinstance(version, str) else None


def _auth(authorization: str | None) -> dict[str, str]:
    return {"Authorization": authorization} if authorization else {}


# --- the run ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: C.ServerVerdict
    reports: tuple[C.ToolReport, ...]
    notes: tuple[str, ...] = ()  # gateway-level findings (initialize, the lists, tools not checked)
    unchecked: int = 0  # tools past MAX_TOOLS or the run's total time


async def run_check(opts: Options) -> Outcome:
    """Raises :class:`Unusable` when the upstream cannot be checked."""
    try:
        return await _run_check(opts)
    finally:
        if opts.login is not None:
            await opts.login.close()  # its session to the authorization server (the app closes it too)


async def _run_check(opts: Options) -> Outcome:
    deadline = asyncio.get_running_loop().time() + opts.total_timeout
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        verdict, upstream_tools = await _before(deadline, opts, probe(http, opts))
        rounds, answering = Rounds(), Answering(opts.roots)
        async with served_gateway(opts.upstream, rounds, opts.trace, opts.login, opts.headers) as url:
            client = LegacyClient(http, url, answering, opts.authorization)
            try:
                notes, legacy_tools = await _before(deadline, opts, _session_checks(client, opts))
                drive = _Drive(client, opts, rounds, answering)
                reports = await _tool_reports(drive, upstream_tools, legacy_tools, deadline)
            finally:
                await client.close()
    names = _names(opts, upstream_tools)
    late = sum(r.error == _LATE for r in reports)
    if len(names) > MAX_TOOLS:
        notes += (f"checked the first {MAX_TOOLS} of {len(names)} tools (the check's cap); "
                  f"{len(names) - MAX_TOOLS} not checked: name them with --tools",)
    if late:
        notes += (f"{late} tools not called: the run's total time ({opts.total_timeout:g} s) ran out",)
    return Outcome(verdict, reports, notes, max(len(names) - MAX_TOOLS, 0) + late)


async def _before(deadline: float, opts: Options, step: Awaitable[_T]) -> _T:
    """``step`` within the run's total time."""
    try:
        async with asyncio.timeout_at(deadline):
            return await step
    except TimeoutError:
        raise Unusable(f"the check took longer than its total time ({opts.total_timeout:g} s, "
                       "--total-timeout)") from None


class Answering:
    """The client's Answerer: the current tool's answers from ``--answers`` (the n-th request of a kind gets the
    n-th answer), else the canned ones; asked a URL elicitation, it calls ``on_url`` (the out-of-band wait)."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots, self.answers, self.seen = roots, S.Answers(), dict[C.InputKind, int]()
        self.on_url: Callable[[], None] | None = None

    def start(self, answers: S.Answers, on_url: Callable[[], None] | None) -> None:
        self.answers, self.seen, self.on_url = answers, {}, on_url

    def __call__(self, method: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        kind = C.input_kind(method, params)
        if kind is C.InputKind.ELICITATION_URL and self.on_url is not None:
            self.on_url()
        if kind is not None:
            # Form and URL elicitations take their answers from one sequence, as a scenario file gives them.
            key = C.InputKind.ELICITATION_FORM if kind is C.InputKind.ELICITATION_URL else kind
            index = self.seen[key] = self.seen.get(key, -1) + 1
            if (given := self.answers.result(kind, index)) is not None:
                return given
        return C.canned_answer(method, params, self.roots)


@dataclass(frozen=True, slots=True)
class _Drive:
    """What calling one tool needs: the session, the options, the round counter and the answers."""

    client: LegacyClient
    opts: Options
    rounds: Rounds
    answering: Answering


async def _session_checks(client: LegacyClient, opts: Options) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """The session's initialize and lists through the gateway, each page within ``--timeout``."""
    try:
        async with asyncio.timeout(opts.timeout * 4):
            return await _session_lists(client)
    except TimeoutError:
        raise Unusable(f"initialize and the lists through the gateway took longer than {opts.timeout * 4:g} s "
                       "(4 x --timeout)") from None


async def _session_lists(client: LegacyClient) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
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


_LATE = "not called: the run's total time (--total-timeout) ran out"


def _names(opts: Options, upstream_tools: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(opts.tools) or [str(t["name"]) for t in upstream_tools]


async def _tool_reports(drive: _Drive, upstream_tools: Sequence[Mapping[str, Any]],
                        legacy_tools: Sequence[Mapping[str, Any]], deadline: float) -> tuple[C.ToolReport, ...]:
    """One report per tool, for the first :data:`MAX_TOOLS`; past ``deadline`` a tool is skipped uncalled."""
    opts = drive.opts
    listed = C.listing_problems(upstream_tools, legacy_tools)
    by_name: dict[Any, Mapping[str, Any]] = {t.get("name"): t for t in upstream_tools}  # names as listed: unchecked
    names = _names(opts, upstream_tools)[:MAX_TOOLS]
    loop, reports = asyncio.get_running_loop(), []
    for index, name in enumerate(names, 1):
        problems, started = listed.get(name, ()), loop.time()
        if name not in by_name:
            report = C.ToolReport(name, C.Status.FAILED, error="not in the server's tools/list")
        elif any(p.kind is C.ProblemKind.DROPPED for p in problems):
            report = C.dropped_report(name, problems)
        elif deadline - started <= 0:
            report = C.ToolReport(name, C.Status.SKIPPED, problems=problems, error=_LATE)
        else:
            report = await _call_one(drive, by_name[name], problems, min(opts.timeout, deadline - started))
        reports.append(report)
        if opts.progress is not None:
            opts.progress(index, len(names), report, loop.time() - started)
    return tuple(reports)


async def _call_one(drive: _Drive, tool: Mapping[str, Any], listed: tuple[C.Problem, ...],
                    seconds: float) -> C.ToolReport:
    name, opts, step = tool["name"], drive.opts, drive.opts.answers.get(tool["name"])
    arguments = opts.arguments.get(name)
    if arguments is None:
        arguments = dict(step.arguments) if step else C.synthesize_arguments(tool.get("inputSchema"))
    if isinstance(arguments, C.Skip):
        return C.ToolReport(name, C.Status.SKIPPED, problems=listed, error=arguments.reason)
    drive.rounds.count = 0
    inputs: list[C.InputKind] = []
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(seconds) as budget:
            def out_of_band() -> None:  # the wait for a step no scripted client takes starts now, and is short
                budget.reschedule(min(budget.when() or math.inf, loop.time() + OUT_OF_BAND_SECONDS))
            drive.answering.start(step.answers if step else S.Answers(), out_of_band)
            message = await drive.client.request("tools/call", {"name": name, "arguments": arguments}, inputs)
    except TimeoutError:
        await drive.client.cancel("python -m gateway check: no answer in time")
        observed = C.Observation(name, tuple(inputs), drive.rounds.count, timed_out=True)
        if C.InputKind.ELICITATION_URL in inputs:
            report = C.judge(observed, listed)
            return replace(report, error=f"{report.error} (waited {OUT_OF_BAND_SECONDS:g} s)")
        if seconds < opts.timeout:  # cut short by the run's total time, not the tool's own slowness
            return C.ToolReport(name, C.Status.SKIPPED, tuple(inputs), drive.rounds.count, listed, _LATE)
        return C.judge(observed, listed)
    observed = C.Observation(name, tuple(inputs), drive.rounds.count, message.get("result"), message.get("error"))
    report = C.judge(observed, listed)
    return S.expected(report, step, observed) if step else report


# --- the command line ---------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream", required=True, help="the 2026-07-28 server's URL")
    parser.add_argument("--token-env", metavar="VAR", help="send 'Authorization: Bearer $VAR' (upstream and gateway)")
    parser.add_argument("--tools", help="comma-separated tool names (default: every tool)")
    parser.add_argument("--args", metavar="FILE", help="JSON or TOML file: tool name -> arguments")
    parser.add_argument("--answers", metavar="FILE",
                        help="a scenario file (config/scenarios/ format): each tool's first [[step]] call gives its "
                             "arguments, the answers to its sampling, elicitation and roots requests, and "
                             "expectations (config/check/reference-core.toml: the reference core's)")
    parser.add_argument("--roots", help="comma-separated root URIs for roots/list (default: the current directory)")
    parser.add_argument("--timeout", type=_seconds, default=60.0,
                        help="seconds for each request and each tool call (default 60)")
    parser.add_argument("--total-timeout", type=_seconds, default=900.0,
                        help="seconds for the whole run; tools not called by then are skipped (default 900)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--trace", metavar="FILE", help="write the run's translation trace here (JSON Lines, as "
                        "`serve --trace`; `python -m gateway trace FILE` renders it)")
    parser.add_argument("--trace-content", action="store_true",
                        help="keep arguments, sampling/elicitation content and results in the trace")
    add_login_arguments(parser)  # the stdio door's login: the same flags, the same token folder


def options(args: argparse.Namespace) -> Options:
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise Unusable(f"environment variable {args.token_env} is not set")
    roots = _split(args.roots) or (Path.cwd().resolve().as_uri(),)
    trace = TraceConfig(file=_writable(args.trace), content=args.trace_content) if args.trace else None
    upstream = _upstream_setup(args)
    return Options(args.upstream, token, _split(args.tools), load_arguments(args.args), roots, args.timeout, trace,
                   args.total_timeout, load_answers(args.answers), _progress, upstream.login, upstream.headers)


def _upstream_setup(args: argparse.Namespace) -> UpstreamSetup:
    """The login and headers of the stdio door's flags (gateway.ops.stdio_login), for this upstream."""
    try:
        setup = upstream_setup(args, load_config(upstream_url=args.upstream), program="check")
    except ConfigError as exc:
        raise Unusable(str(exc)) from None
    if isinstance(setup, str):
        raise Unusable(setup)
    return setup


def _progress(index: int, total: int, report: C.ToolReport, seconds: float) -> None:
    why = f": {report.error}" if report.status is not C.Status.OK and report.error else ""
    print(f"check: [{index}/{total}] {report.name} {report.status.value} ({seconds:.1f} s){why}", file=sys.stderr,
          flush=True)


def load_answers(path: str | None) -> dict[str, S.Step]:
    """``--answers``: a scenario file; each tool's first ``call`` step (a prompt or resource step is refused)."""
    if path is None:
        return {}
    try:
        scenario = S.parse(tomllib.loads(Path(path).read_text(encoding="utf-8")), path)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, S.ScenarioError) as exc:
        raise Unusable(f"--answers {path}: {exc}") from None
    steps: dict[str, S.Step] = {}
    for step in scenario.steps:
        if step.target is not S.Target.CALL:
            raise Unusable(f"--answers {path}: {step.label}: check calls tools; give prompts and resources to replay")
        steps.setdefault(step.name, step)
    return steps


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and 86400, not {text!r}")
    return value


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
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a shape the checks above missed
        _print_unusable(args, f"malformed data ({type(exc).__name__}: {str(exc)[:200]})")
        return 2
    server = {"url": args.upstream, "name": outcome.verdict.info.get("name"),
              "version": outcome.verdict.info.get("version"), "notes": list(outcome.notes)}
    if args.json:
        summary = {**C.summary(outcome.reports), "unchecked": outcome.unchecked}
        print(json.dumps({"server": server, "tools": [r.to_json() for r in outcome.reports],
                          "summary": summary}, indent=2))
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
