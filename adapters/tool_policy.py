"""Per-peer tool policy: which tools a peer sees and may call, and which scope a tool needs.

What this module owns (issue: per-peer tool policy; ``[[peers]]`` ``tools_allowed`` / ``tools_denied`` /
``tool_scopes``):

- the policy as a value (:class:`ToolPolicy`) and its record form, kept in the session record's pins snapshot;
- glob and scope syntax checks for the configuration (``check-config``);
- filtering a ``tools/list`` result (only its ``tools`` array: the page's cursor and every other key are kept as
  the upstream sent them; a filtered page may come out short or empty, which pagination allows, 2025-11-25
  server/utilities/pagination);
- deciding a ``tools/call``: allowed, hidden, or needing a scope the token lacks.

Decisions:

- **Visible** = matched by ``tools_allowed`` (unset: every tool) and by no ``tools_denied`` glob. Globs are
  ``fnmatch`` globs, case-sensitive like tool names (2025-11-25 server/tools, Tool Names).
- **A hidden tool's call** gets INVALID_PARAMS "Unknown tool", the error 2025-11-25 server/tools (Error Handling) shows
  for an unknown tool. It is decided from the name and the policy alone, never from the upstream's tools, so a
  name refused this way tells the caller nothing about whether such a tool exists.
- **A tool needing a scope** (every ``tool_scopes`` glob matching its name adds its scope) is listed; its call
  with a token lacking the scope is refused 403 ``insufficient_scope`` naming it (2025-11-25
  basic/authorization, Scope Challenge Handling), so the client can step up. Without a verified token (no
  ``[gateway.auth]``) no scope can ever be shown: the tool is hidden, fail closed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from fnmatch import fnmatchcase
from typing import Final

from adapters.errors import INVALID_PARAMS, ErrorValue
from adapters.jsonwire import JsonObject, JsonValue

MAX_GLOB: Final = 256  # a tool name SHOULD be at most 128 characters (2025-11-25 server/tools, Tool Names)
# RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
_SCOPE_CHARS: Final = frozenset(chr(c) for c in (0x21, *range(0x23, 0x5C), *range(0x5D, 0x7F)))


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """``allowed`` None: every tool not denied; ``scopes``: (glob, scope) pairs, in the configuration's order."""

    allowed: tuple[str, ...] | None = None
    denied: tuple[str, ...] = ()
    scopes: tuple[tuple[str, str], ...] = ()

    @property
    def open(self) -> bool:
        """Nothing to filter or check: the common case, decided without looking at a message."""
        return self.allowed is None and not self.denied and not self.scopes


OPEN: Final = ToolPolicy()


class Verdict(Enum):
    ALLOW = "allow"
    HIDDEN = "hidden"  # answered as an unknown tool
    STEP_UP = "step_up"  # the token lacks a scope the tool needs


@dataclass(frozen=True, slots=True)
class CallDecision:
    verdict: Verdict
    scopes: tuple[str, ...] = ()  # STEP_UP: the scopes the tool needs (all of them, sorted)


def _any(name: str, globs: Iterable[str]) -> bool:
    return any(fnmatchcase(name, g) for g in globs)


def required_scopes(policy: ToolPolicy, name: str) -> tuple[str, ...]:
    return tuple(sorted({scope for glob, scope in policy.scopes if fnmatchcase(name, glob)}))


def listed(policy: ToolPolicy, name: str) -> bool:
    """Whether the tool is on this peer's list (a scope it needs does not hide it: the call steps up)."""
    return (policy.allowed is None or _any(name, policy.allowed)) and not _any(name, policy.denied)


def decide_call(policy: ToolPolicy, name: str, scopes: frozenset[str] | None) -> CallDecision:
    """A ``tools/call`` of ``name`` by a principal holding ``scopes`` (None: no verified token)."""
    if not listed(policy, name):
        return CallDecision(Verdict.HIDDEN)
    needed = required_scopes(policy, name)
    if not needed or (scopes is not None and scopes.issuperset(needed)):
        return CallDecision(Verdict.ALLOW)
    return CallDecision(Verdict.STEP_UP, needed) if scopes is not None else CallDecision(Verdict.HIDDEN)


def filter_list(policy: ToolPolicy, result: JsonObject, scoped: bool) -> JsonObject:
    """A ``tools/list`` result with the tools this peer may not use taken out; every other key (``nextCursor``
    among them, opaque) is the upstream's. ``scoped``: the principal has a verified token (else tools needing a
    scope are taken out too, as their calls would be)."""
    tools = result.get("tools")
    if policy.open or not isinstance(tools, list):
        return result
    kept = [t for t in tools if _shown(policy, t, scoped)]
    if len(kept) == len(tools):
        return result
    return {**result, "tools": kept}


def filter_answer(policy: ToolPolicy, message: JsonValue, scoped: bool) -> JsonValue:
    """A JSON-RPC answer to ``tools/list`` (a 2026-07-28 passthrough's) with :func:`filter_list` applied to its
    result; anything else (an error, a notification on its stream) as it is."""
    given = message.get("result") if isinstance(message, dict) else None
    if not isinstance(message, dict) or not isinstance(given, dict):
        return message
    result = filter_list(policy, given, scoped)
    return message if result is given else {**message, "result": result}


def _shown(policy: ToolPolicy, tool: JsonValue, scoped: bool) -> bool:
    name = tool.get("name") if isinstance(tool, Mapping) else None
    if not isinstance(name, str):
        return True  # not a tool this policy can name: left to the schema checks that follow
    return listed(policy, name) and (scoped or not required_scopes(policy, name))


def unknown_tool(name: str, peer: str) -> ErrorValue:
    """The answer to a hidden tool's call (module docstring); the log names the peer for the operator."""
    return ErrorValue(INVALID_PARAMS, f"Unknown tool: {name}", log=f"tool {name!r} is not allowed for peer {peer}")


# --- configuration -----------------------------------------------------------------------------------------
def glob_problem(glob: str) -> str | None:
    """Why a name glob cannot be used, or None. A bracket left open would silently match only itself."""
    if not glob:
        return "an empty glob matches nothing"
    if len(glob) > MAX_GLOB:
        return f"a glob longer than {MAX_GLOB} characters"
    if any(c.isspace() or not c.isprintable() for c in glob):
        return f"glob {glob!r} holds whitespace or control characters"
    depth = 0
    for c in glob:
        if c == "[":
            depth += 1
        elif c == "]" and depth:
            depth -= 1
    return f"glob {glob!r} opens a '[' it never closes" if depth else None


def scope_problem(scope: str) -> str | None:
    """Why a value is not one OAuth scope (RFC 6749 §3.3 scope-token), or None."""
    if not scope or not set(scope) <= _SCOPE_CHARS:
        return f"scope {scope!r} is not one OAuth scope token (RFC 6749 §3.3: printable ASCII, no space, '\"', '\\\\')"
    return None


def policy_record(policy: ToolPolicy) -> JsonObject | None:
    """The JSON-compatible form kept in a session record's pins (None when open: old records read the same)."""
    if policy.open:
        return None
    return {"allowed": None if policy.allowed is None else [*policy.allowed], "denied": [*policy.denied],
            "scopes": [[*pair] for pair in policy.scopes]}


def policy_from_record(data: JsonValue) -> ToolPolicy:
    """The policy :func:`policy_record` wrote: globs as lists of names, scopes as [glob, scope] pairs."""
    if not isinstance(data, Mapping):
        return OPEN
    allowed, scopes = data.get("allowed"), data.get("scopes")
    pairs = [p for p in scopes if isinstance(p, list) and len(p) == 2] if isinstance(scopes, list) else []
    return ToolPolicy(None if allowed is None else _names(allowed), _names(data.get("denied")),
                      tuple((str(glob), str(scope)) for glob, scope in pairs))


def _names(value: JsonValue) -> tuple[str, ...]:
    return tuple(str(name) for name in value) if isinstance(value, list) else ()
