"""``python -m gateway check``, the pure half: what the scripted 2025-11-25 client sends and how its observations
are judged.

Owns the argument synthesis from a tool's ``inputSchema``, the canned answers to live requests, the judging of
one tool's observation into a :class:`ToolReport` (:class:`Status`, mapping :class:`Problem`\\ s), the verdict on
the upstream's ``server/discover`` answer, and the human and JSON renderings. The shell
(``gateway.ops.check``) drives the in-process gateway and feeds plain observations in.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from mcp_types.methods import validate_server_result

from adapters.errors import GATEWAY_LIMIT_EXCEEDED, INTERNAL_ERROR, INVALID_PARAMS, UpstreamFault
from adapters.jsonwire import JsonObject
from adapters.protocol import MODERN_VERSION
from adapters.upstream import x_mcp_header_map

LEGACY = "2025-11-25"
CLIENT_INFO = {"name": "mcp-gateway-check", "version": "1"}
# Everything a 2025-11-25 client can declare (2025-11-25 client §Sampling, §Elicitation, §Roots), so no tool is
# refused for a capability the check lacks: a refusal then points at the mapping, not at the client.
CLIENT_CAPABILITIES: JsonObject = {"sampling": {}, "elicitation": {"form": {}, "url": {}},
                                   "roots": {"listChanged": True}}
SAMPLED_TEXT = "A canned reply from python -m gateway check."
_MAX_DEPTH = 32
_MAX_ARMS = 16  # anyOf/oneOf arms tried


class Status(Enum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


class InputKind(Enum):
    """The live requests the bridge can send a 2025-11-25 client for one ``input_required`` entry."""

    SAMPLING = "sampling"
    ELICITATION_FORM = "elicitation.form"
    ELICITATION_URL = "elicitation.url"
    ROOTS = "roots"


class ProblemKind(Enum):
    DROPPED = "dropped"
    OUTPUT_SCHEMA_REMOVED = "outputSchema removed"
    ROUND_LIMIT = "round limit"
    GATEWAY_LIMIT = "gateway limit"
    MAPPING_FAULT = "mapping fault"
    UPSTREAM_ANSWER_REFUSED = "upstream answer refused"
    RESULT_SCHEMA = "2025 schema"
    TIMEOUT = "timeout"

    @property
    def fatal(self) -> bool:
        # A removed outputSchema loses only the machine-readable shape (decision 3): the tool still answers.
        return self is not ProblemKind.OUTPUT_SCHEMA_REMOVED


@dataclass(frozen=True, slots=True)
class Problem:
    kind: ProblemKind
    detail: str

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}"


@dataclass(frozen=True, slots=True)
class ToolReport:
    name: str
    status: Status
    inputs: tuple[InputKind, ...] = ()
    rounds: int = 0
    problems: tuple[Problem, ...] = ()
    error: str | None = None  # the JSON-RPC error the client got, or why the tool was skipped

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "inputs": [k.value for k in self.inputs],
                "rounds": self.rounds, "problems": [str(p) for p in self.problems], "error": self.error}


@dataclass(frozen=True, slots=True)
class Observation:
    """What the scripted client saw for one ``tools/call``: exactly one of result, error or timed_out."""

    name: str
    inputs: tuple[InputKind, ...] = ()
    rounds: int = 0  # upstream tools/call requests the gateway sent for it
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class Skip:
    reason: str


# --- arguments ---------------------------------------------------------------------------------------------
# What one synthesized value may cost: a character or a value is one unit, an array of n items n times its item.
# A schema asking for more (a minLength of 4e9, nested minItems) is skipped, never built.
MAX_ARGUMENT_UNITS = 65_536


class _Unsatisfiable(ValueError):
    pass


@dataclass(slots=True)
class _Budget:
    left: int = MAX_ARGUMENT_UNITS

    def spend(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise _Unsatisfiable(f"asks for a value larger than the check builds ({MAX_ARGUMENT_UNITS} units)")


def synthesize_arguments(schema: Any) -> dict[str, Any] | Skip:
    """The smallest arguments valid for ``inputSchema``: required properties only, each from ``const``/
    ``default``/``enum``/``examples`` first, then the type's minimum. :class:`Skip` when it cannot tell, or when
    they would be larger than :data:`MAX_ARGUMENT_UNITS`."""
    try:
        value = _object(schema if isinstance(schema, Mapping) else {}, 0, _Budget(), consent=False)
    except _Unsatisfiable as exc:
        return Skip(f"cannot build arguments from inputSchema: {exc}")
    return value


def form_content(requested_schema: Any) -> dict[str, Any]:
    """A form answer: every property the check can fill (a user fills the whole form), booleans ``true``: a
    confirmation left unticked is not consent (2025-11-25 client §Elicitation), so ``accept`` would mean nothing."""
    schema = requested_schema if isinstance(requested_schema, Mapping) else {}
    properties = schema.get("properties")
    out: dict[str, Any] = {}
    budget = _Budget()
    for name, sub in (properties.items() if isinstance(properties, Mapping) else ()):
        try:
            out[name] = _value(sub, 1, budget, consent=True)
        except _Unsatisfiable:
            continue
    return out


def _value(schema: Any, depth: int, budget: _Budget, *, consent: bool) -> Any:
    if depth > _MAX_DEPTH:
        raise _Unsatisfiable("nested too deeply")
    budget.spend(1)
    if not isinstance(schema, Mapping):
        return None  # `true` or a missing schema: any value is valid, JSON null included
    for key in ("const", "default"):
        if key in schema:
            return _declared(schema[key], budget)
    for key in ("enum", "examples"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _declared(schema[key][0], budget)
    if "$ref" in schema or "allOf" in schema or "not" in schema:
        raise _Unsatisfiable("uses $ref/allOf/not")
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return _first_arm(schema[key], depth, budget, consent)
    return _typed(schema, depth, budget, consent)


def _declared(value: Any, budget: _Budget) -> Any:
    """A value the schema declares, paid for by its size (an array repeats it), walked until the budget ends."""
    stack = [value]
    while stack:
        item = stack.pop()
        budget.spend(len(item) if isinstance(item, str) else 1)
        if isinstance(item, Mapping):
            stack.extend((*item.keys(), *item.values()))
        elif isinstance(item, list):
            stack.extend(item)
    return value


def _first_arm(arms: Sequence[Any], depth: int, budget: _Budget, consent: bool) -> Any:
    for arm in arms[:_MAX_ARMS]:
        try:
            return _value(arm, depth + 1, budget, consent=consent)
        except _Unsatisfiable:
            continue
    raise _Unsatisfiable("no satisfiable anyOf/oneOf arm")


def _typed(schema: Mapping[str, Any], depth: int, budget: _Budget, consent: bool) -> Any:
    kind = schema.get("type", "object" if "properties" in schema else None)
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "string":
        return _string(schema, budget)
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "array":
        return _array(schema, depth, budget, consent)
    if kind == "object":
        return _object(schema, depth, budget, consent=consent)
    return {"boolean": consent, "null": None}.get(kind) if kind in ("boolean", "null", None) else _unknown(kind)


def _array(schema: Mapping[str, Any], depth: int, budget: _Budget, consent: bool) -> list[Any]:
    count = _count(schema, "minItems")
    if count == 0:
        return []
    before = budget.left
    item = _value(schema.get("items"), depth + 1, budget, consent=consent)
    budget.spend((before - budget.left) * (count - 1))  # the copies cost what the first one did
    return [item] * count


def _count(schema: Mapping[str, Any], key: str) -> int:
    """A non-negative integer keyword (``minLength``, ``minItems``); absent is 0."""
    value = schema.get(key, 0)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Unsatisfiable(f"{key} is not a non-negative integer")
    return value


def _unknown(kind: Any) -> Any:
    raise _Unsatisfiable(f"unknown type {str(kind)[:40]!r}")


def _object(schema: Mapping[str, Any], depth: int, budget: _Budget, *, consent: bool) -> dict[str, Any]:
    properties, required = schema.get("properties") or {}, schema.get("required") or []
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise _Unsatisfiable("properties is not an object or required is not an array")
    out = {}
    for name in required:
        if not isinstance(name, str):
            raise _Unsatisfiable("required names a non-string")
        budget.spend(len(name))
        try:
            out[name] = _value(properties.get(name), depth + 1, budget, consent=consent)
        except _Unsatisfiable as exc:
            raise _Unsatisfiable(f"{name[:40]}: {exc}") from None
    return out


_FORMATS = {"uri": "file:///", "date-time": "1970-01-01T00:00:00Z", "date": "1970-01-01", "email": "check@example.com"}


def _string(schema: Mapping[str, Any], budget: _Budget) -> str:
    """The format's example, else ``minLength`` x's. A ``pattern`` is never fed to ``re``: a backtracking
    engine can spin for ever on one (``^(a|a)+b$``), so a string with a pattern and no declared value is skipped."""
    if "pattern" in schema:
        raise _Unsatisfiable("has a pattern and no const/default/enum/examples (give the arguments with --args)")
    size = _count(schema, "minLength")
    budget.spend(size)
    form = schema.get("format")
    example = _FORMATS.get(form) if isinstance(form, str) else None
    return example if example is not None and len(example) >= size else "x" * size


def _number(schema: Mapping[str, Any], integer: bool) -> int | float:
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(schema.get("exclusiveMinimum"), (int, float)):
        low = schema["exclusiveMinimum"] + 1
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
               for v in (low, high)):
        raise _Unsatisfiable("minimum/maximum is not a finite number")
    value = low if low is not None else (0 if high is None or high >= 0 else high)
    return int(value) if integer and value == int(value) else value


# --- canned answers to live requests ------------------------------------------------------------------------
def input_kind(method: str, params: Mapping[str, Any]) -> InputKind | None:
    if method == "sampling/createMessage":
        return InputKind.SAMPLING
    if method == "roots/list":
        return InputKind.ROOTS
    if method == "elicitation/create":
        return InputKind.ELICITATION_URL if params.get("mode") == "url" else InputKind.ELICITATION_FORM
    return None


def canned_answer(method: str, params: Mapping[str, Any], roots: Sequence[str]) -> dict[str, Any] | None:
    """A schema-valid 2025-11-25 result for a live request (2025-11-25 client §Sampling/§Elicitation/§Roots)."""
    kind = input_kind(method, params)
    if kind is InputKind.SAMPLING:
        return {"role": "assistant", "content": {"type": "text", "text": SAMPLED_TEXT}, "model": "gateway-check",
                "stopReason": "endTurn"}
    if kind is InputKind.ELICITATION_FORM:
        return {"action": "accept", "content": form_content(params.get("requestedSchema"))}
    if kind is InputKind.ELICITATION_URL:
        return {"action": "accept"}
    if kind is InputKind.ROOTS:
        return {"roots": [{"uri": uri} for uri in roots]}
    return None


# --- judging ------------------------------------------------------------------------------------------------
def listing_problems(upstream_tools: Iterable[Mapping[str, Any]],
                     gateway_tools: Iterable[Mapping[str, Any]]) -> dict[str, tuple[Problem, ...]]:
    """Per tool: what the gateway's 2025 ``tools/list`` lost compared with the direct 2026 one."""
    seen = {t.get("name"): t for t in gateway_tools}
    out: dict[str, tuple[Problem, ...]] = {}
    for tool in upstream_tools:
        name, legacy = str(tool.get("name")), seen.get(tool.get("name"))
        if legacy is None:
            out[name] = (Problem(ProblemKind.DROPPED, _drop_reason(tool)),)
        elif "outputSchema" in tool and "outputSchema" not in legacy:
            out[name] = (Problem(ProblemKind.OUTPUT_SCHEMA_REMOVED, "its root is not an object (decision 3)"),)
    return out


def _drop_reason(tool: Mapping[str, Any]) -> str:
    if x_mcp_header_map(tool.get("inputSchema")) is None:
        return "missing from the gateway's tools/list: invalid x-mcp-header (2026-07-28 server §Tools)"
    return "missing from the gateway's tools/list"


def dropped_report(name: str, problems: tuple[Problem, ...]) -> ToolReport:
    return ToolReport(name, Status.FAILED, problems=problems, error="not callable by a 2025-11-25 client")


def legacy_schema_error(method: str, result: Mapping[str, Any]) -> str | None:
    """Why ``result`` is not a valid 2025-11-25 ``method`` result (official ``mcp-types``), or None."""
    try:
        validate_server_result(method, LEGACY, result)
    except Exception as exc:  # pydantic.ValidationError (or a TypeError for a non-object)
        lines = str(exc).splitlines()
        return " ".join(lines[1:3]).strip() if len(lines) > 1 else str(exc)
    return None


def judge(obs: Observation, listed: tuple[Problem, ...] = ()) -> ToolReport:
    """One tool's observation -> its report. A server's own -32602 is a skip, not a failure: it refused the
    check's synthetic arguments or canned answers, which says nothing about the mapping."""
    base = ToolReport(obs.name, Status.OK, obs.inputs, obs.rounds, listed)
    if obs.timed_out and InputKind.ELICITATION_URL in obs.inputs:
        # 2026-07-28 client §Elicitation: URL `accept` is only consent; the server waits for the out-of-band
        # step at that URL, which a scripted client cannot do. The bridge did its part.
        return _skip(base, "waiting for the out-of-band step of a URL elicitation the check cannot complete")
    if obs.timed_out:
        return _with(base, Problem(ProblemKind.TIMEOUT, "no answer in time"), "no answer in time")
    if obs.error is not None:
        return _judge_error(base, obs.error)
    schema_error = legacy_schema_error("tools/call", obs.result or {})
    if schema_error:
        return _with(base, Problem(ProblemKind.RESULT_SCHEMA, f"the translated result breaks it: {schema_error}"))
    return base


def _judge_error(base: ToolReport, error: Mapping[str, Any]) -> ToolReport:
    code, message = error.get("code"), str(error.get("message", ""))
    data = error.get("data")
    if not isinstance(data, Mapping):
        data = {}
    text = f"{code} {message}"
    if code == GATEWAY_LIMIT_EXCEEDED and data.get("limit") == "max_rounds":
        return _with(base, Problem(ProblemKind.ROUND_LIMIT, f"{message} after {base.rounds} rounds"), text)
    if code == GATEWAY_LIMIT_EXCEEDED and "limit" in data:
        return _with(base, Problem(ProblemKind.GATEWAY_LIMIT, message), text)
    if code == INTERNAL_ERROR and data.get("upstream") == UpstreamFault.REFUSED_GATEWAY:
        fault = "the upstream answered -32020/-32022 to the gateway's request; the client got -32603"
        return _with(base, Problem(ProblemKind.MAPPING_FAULT, fault), text)
    if code == INTERNAL_ERROR and "upstream" in data:
        return _with(base, Problem(ProblemKind.UPSTREAM_ANSWER_REFUSED, f"{data['upstream']}: {message}"), text)
    if code == INVALID_PARAMS and base.inputs:
        return _skip(base, f"the server refused the check's canned answers: {text}")
    if code == INVALID_PARAMS:
        return _skip(base, f"the server refused the check's arguments: {text} (give real ones with --args)")
    return ToolReport(base.name, Status.FAILED, base.inputs, base.rounds, base.problems, text)


def _skip(base: ToolReport, reason: str) -> ToolReport:
    return ToolReport(base.name, Status.SKIPPED, base.inputs, base.rounds, base.problems, reason)


def _with(base: ToolReport, problem: Problem, error: str | None = None) -> ToolReport:
    problems = (*base.problems, problem)
    status = Status.FAILED if any(p.kind.fatal for p in problems) else base.status
    return ToolReport(base.name, status, base.inputs, base.rounds, problems, error)


# --- the server ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ServerVerdict:
    modern: bool
    description: str
    info: Mapping[str, Any]


def judge_server(status: int, message: Any, text: str, legacy_version: str | None) -> ServerVerdict:
    """The upstream's answer to a direct ``server/discover`` (2026-07-28 server §Discovery). ``legacy_version``
    is what a 2025 ``initialize`` negotiated when discover failed (None when it was not tried or failed too)."""
    result = message.get("result") if isinstance(message, Mapping) else None
    if isinstance(result, Mapping):
        versions, meta = result.get("supportedVersions"), result.get("_meta")
        info = meta.get("io.modelcontextprotocol/serverInfo") if isinstance(meta, Mapping) else None
        info = {k: str(v)[:80] for k, v in info.items() if k in ("name", "version")} if isinstance(
            info, Mapping) else {}
        if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
            return ServerVerdict(False, "a malformed server/discover result: supportedVersions is not an array "
                                        "of strings", info)
        if MODERN_VERSION in versions:
            return ServerVerdict(True, f"{info.get('name', '?')} {info.get('version', '?')}", info)
        return ServerVerdict(False, f"a server supporting {versions[:8]}, not {MODERN_VERSION}", info)
    error = message.get("error") if isinstance(message, Mapping) else None
    said = str(error.get("message"))[:120] if isinstance(error, Mapping) else body_summary(text)
    if legacy_version:
        return ServerVerdict(False, f"a {legacy_version[:4]}-era server: it answered {status} {said}", {})
    return ServerVerdict(False, f"not a {MODERN_VERSION} server: it answered {status} {said}", {})


_TITLE = re.compile(r"<title[^>]*>([^<]{0,400})</title>", re.IGNORECASE)
_TAG = re.compile(r"<[^>]{0,2000}>")


def body_summary(text: str, limit: int = 120) -> str:
    """The start of a non-JSON answer's body as one line: an HTML page (a proxy's or a web server's error page)
    by its title, else its text without tags; whitespace and newlines collapsed."""
    head = text.lstrip()[:200].lower()
    if head.startswith(("<!doctype html", "<html")) or "<body" in head or "<title" in head:
        title = _TITLE.search(text)
        words = " ".join(html.unescape(title.group(1) if title else _TAG.sub(" ", text)).split())
        return f"an HTML page ({words[:limit]})" if words else "an HTML page"
    return " ".join(text.split())[:limit]


# --- the direct tools/list ---------------------------------------------------------------------------------
class Malformed(ValueError):
    """Data from the server the check cannot read: the run stops with exit 2 and this one-line message."""


def tools_page(message: Any) -> tuple[list[Mapping[str, Any]], str | None]:
    """One direct 2026 ``tools/list`` answer -> its tools and next cursor (2026-07-28 server §Tools)."""
    if isinstance(message, Mapping) and isinstance(message.get("error"), Mapping):
        error = message["error"]
        raise Malformed(f"tools/list failed: {error.get('code')} {str(error.get('message'))[:120]}")
    result = message.get("result") if isinstance(message, Mapping) else None
    if not isinstance(result, Mapping):
        raise Malformed("a malformed tools/list answer: no result object")
    tools, cursor = result.get("tools", []), result.get("nextCursor")
    if not isinstance(tools, list):
        raise Malformed("a malformed tools/list result: tools is not an array")
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise Malformed(f"a malformed tools/list result: tools[{index}] is not an object with a string name")
    if cursor is not None and not isinstance(cursor, str):
        raise Malformed("a malformed tools/list result: nextCursor is not a string")
    return tools, cursor or None


# --- output -------------------------------------------------------------------------------------------------
def summary(reports: Iterable[ToolReport]) -> dict[str, int]:
    out = {s.value: 0 for s in Status}
    for report in reports:
        out[report.status.value] += 1
    return out


def exit_code(reports: Iterable[ToolReport]) -> int:
    return 1 if any(r.status is Status.FAILED for r in reports) else 0


def render_table(reports: Sequence[ToolReport]) -> str:
    rows = [("tool", "status", "inputs", "rounds", "problems")]
    for r in reports:
        notes = [str(p) for p in r.problems] + ([r.error] if r.error and not r.problems else [])
        rows.append((r.name, r.status.value, ",".join(k.value for k in r.inputs) or "-", str(r.rounds),
                     "; ".join(notes) or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4] for row in rows]
    counts = summary(reports)
    lines.append(f"{len(reports)} tools: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped")
    return "\n".join(lines)
