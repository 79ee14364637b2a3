"""``workspace_scan``: roots through MRTR (client/roots, deprecated but live until 2027-07-28 at the earliest).

With an explicit ``workspaceUri`` it scans that workspace. Without one it asks the client for its roots (key
``roots``); each root is then scanned only if it lies inside the principal's allow-list: roots are a hint
from the client, never an authorization.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from pydantic import ValidationError

from modern_server.containment import allowed
from modern_server.errors import McpError
from modern_server.framework import Context, Tool, arguments, bound_call, input_required, next_round, text_result
from modern_server.tools.notes import _authorize_workspace, notes_in, workspaces

KEY = "roots"


def _scan(ctx: Context, roots: list[str]) -> dict[str, Any]:
    scanned = [r for r in roots if allowed(workspaces(ctx), r)]
    skipped = [r for r in roots if r not in scanned]
    found = sorted({n.id: n for r in scanned for n in notes_in(ctx, r)}.values(), key=lambda n: n.uri)
    notes = [{"id": n.id, "uri": n.uri, "title": n.title} for n in found]
    lines = [f"{n['title']}: {n['uri']}" for n in notes] or ["(no notes)"]
    text = f"Scanned {len(scanned)} root(s), skipped {len(skipped)}.\n" + "\n".join(lines)
    return text_result(text, {"scanned": scanned, "skipped": skipped, "notes": notes})


def _roots(value: Any) -> list[str]:
    try:
        mcp_types.ListRootsResult.model_validate(value)
    except ValidationError:
        raise McpError.invalid_params("inputResponses.roots is not a ListRootsResult") from None
    return [root["uri"] for root in value["roots"]]


async def workspace_scan(ctx: Context) -> dict[str, Any]:
    explicit = arguments(ctx).get("workspaceUri")
    if explicit is not None:
        return _scan(ctx, [_authorize_workspace(ctx, explicit)])
    ctx.require(ctx.declares("roots"), {"roots": {}}, "workspace_scan without workspaceUri asks for the client's roots")
    opened = ctx.open_state(bound_call(ctx))
    round_no = next_round(ctx, opened)
    answer = ctx.input_responses().get(KEY)
    if opened is None or answer is None:
        request = {"method": "roots/list", "params": {}}
        return input_required({KEY: request}, ctx.seal(bound_call(ctx), "roots", {"round": round_no}))
    return _scan(ctx, _roots(answer))


TOOLS = (
    Tool("workspace_scan", "List the notes in a workspace, or in the client's roots when no workspace is given.", {
        "type": "object", "properties": {"workspaceUri": {"type": "string"}}}, workspace_scan,
        title="Scan a workspace", annotations={"readOnlyHint": True}),
)
