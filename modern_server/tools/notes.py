"""``notes_delete`` (form elicitation with an explicit scope) and the notes as resources.

Authorization is the principal's allow-list of workspace URIs (config ``workspaces``), checked by path
components (``containment``). Deleting always asks for confirmation (key ``delete_choice``, client/elicitation
§Form mode): a flat schema with a ``note_id`` enum of the signed candidate set and a ``confirm`` boolean.
- ``accept`` with valid content inside the candidate set -> re-authorize, re-check containment, then claim the
  state's nonce and delete in one SQLite transaction (two processes can never both execute one confirmation);
- ``decline`` -> terminal: nothing deleted, the nonce is consumed so the state cannot be replayed;
- ``cancel`` -> no mutation, the same state stays retryable until it expires;
- missing content, or ``confirm`` false, is never consent.
A used confirmation sent again with the same ``requestState`` and the same answers is the same step resent (a
gateway that lost the answer, 2026-07-28 basic/patterns §Multi Round-Trip Requests, retries): it gets the result
recorded with the claim, and nothing happens twice; with other answers it is a replay, refused with -32602.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from pydantic import ValidationError

from modern_server.containment import allowed, components, contains
from modern_server.errors import McpError
from modern_server.framework import (
    Context,
    ResourceFamily,
    Tool,
    arguments,
    bound_call,
    input_required,
    next_round,
    text_result,
)
from modern_server.sealing import Opened, digest
from modern_server.storage import GoneError, Note, ReplayError, Reply

CHOICE = "delete_choice"


def workspaces(ctx: Context) -> tuple[str, ...]:
    return ctx.services.config.workspaces.get(ctx.principal, ())


def _authorize_workspace(ctx: Context, uri: Any) -> str:
    if not isinstance(uri, str) or components(uri) is None:
        raise McpError.invalid_params("workspaceUri must be a file:// URI")
    if not allowed(workspaces(ctx), uri):
        raise McpError.invalid_params(f"workspace {uri} is not in your allow-list")
    return uri


def notes_in(ctx: Context, workspace: str) -> list[Note]:
    return [n for n in ctx.services.store.notes() if contains(workspace, n.uri) and allowed(workspaces(ctx), n.uri)]


def _ask(ctx: Context, candidates: list[Note], round_no: int, nonce: str | None = None) -> dict[str, Any]:
    ids = sorted(n.id for n in candidates)
    schema = {"type": "object", "properties": {
        "note_id": {"type": "string", "title": "Note", "enum": ids,
                    "enumNames": [f"{n.title} ({n.uri})" for n in sorted(candidates, key=lambda n: n.id)]},
        "confirm": {"type": "boolean", "title": "Delete it permanently", "default": False}},
        "required": ["note_id", "confirm"]}
    request = {"method": "elicitation/create", "params": {
        "mode": "form", "message": f"{len(ids)} note(s) match. Which one should be deleted?",
        "requestedSchema": schema}}
    state = ctx.seal(bound_call(ctx), "confirm", {"round": round_no, "candidates": ids}, nonce=nonce)
    return input_required({CHOICE: request}, state)


def _elicit_result(value: Any) -> dict[str, Any]:
    try:
        mcp_types.ElicitResult.model_validate(value)
    except ValidationError:
        raise McpError.invalid_params(f"inputResponses.{CHOICE} is not an ElicitResult") from None
    return value


async def notes_delete(ctx: Context) -> dict[str, Any]:
    ctx.require(ctx.declares_form_elicitation(), {"elicitation": {"form": {}}},
                "notes_delete asks for confirmation with a form elicitation")
    args = arguments(ctx)
    workspace = _authorize_workspace(ctx, args.get("workspaceUri"))
    title = args.get("title")
    if not isinstance(title, str) or not title:
        raise McpError.invalid_params("title must be a non-empty string")
    opened = ctx.open_state(bound_call(ctx))  # a changed title or workspace cannot reuse the state
    round_no = next_round(ctx, opened)
    if opened is not None and ctx.services.store.nonce_used(opened.nonce):
        return _recorded(ctx, opened)
    candidates = [n for n in notes_in(ctx, workspace) if n.title == title]
    if opened is None:
        if not candidates:
            raise McpError.invalid_params(f"no note titled {title!r} in {workspace}")
        return _ask(ctx, candidates, round_no)
    answer = ctx.input_responses().get(CHOICE)
    if answer is None:
        return _ask(ctx, candidates, round_no, nonce=opened.nonce)
    return _decide(ctx, workspace, _elicit_result(answer), opened)


def _step(ctx: Context) -> str:
    """What identifies one confirmed step besides its nonce: the exact state and answer it was sent with."""
    return digest([ctx.params.get("requestState"), ctx.input_responses().get(CHOICE)])


def _recorded(ctx: Context, opened: Opened) -> dict[str, Any]:
    """A used confirmation again: the same step resent gets its recorded result, anything else is a replay."""
    result = ctx.services.store.reply(opened.nonce, _step(ctx), ctx.services.clock())
    if result is None:
        raise McpError.invalid_params("this confirmation was already used")
    return result


def _decide(ctx: Context, workspace: str, answer: dict[str, Any], opened: Opened) -> dict[str, Any]:
    action, signed = answer["action"], opened.values["candidates"]
    if action == "cancel":  # no mutation; the same state may be retried until it expires
        return text_result("Cancelled: nothing was deleted. Retry to choose again.", {"deleted": None})
    if action == "decline":
        declined = text_result("Declined: nothing was deleted.", {"deleted": None})
        _consume(ctx, opened, "declined", declined)
        return declined
    content = answer.get("content") or {}
    note_id, confirm = content.get("note_id"), content.get("confirm")
    if confirm is not True or not isinstance(note_id, str):
        raise McpError.invalid_params("deletion needs note_id and confirm=true; nothing was deleted")
    if note_id not in signed:
        raise McpError.invalid_params(f"note {note_id!r} was not one of the offered candidates")
    note = ctx.services.store.note(note_id)
    if note is None and ctx.services.store.nonce_used(opened.nonce):
        return _recorded(ctx, opened)  # another process carried this very step out since the check above
    # Re-authorize at the moment of mutation: the allow-list or the note may have changed since round 1.
    if note is None or not allowed(workspaces(ctx), note.uri) or not allowed((workspace,), note.uri):
        raise McpError.invalid_params(f"note {note_id!r} is no longer deletable here")
    deleted = text_result(f"Deleted {note.title!r} ({note.uri}).", {"deleted": note_id})
    try:
        ctx.services.store.delete_with_nonce(opened.nonce, note_id, _reply(ctx, opened, deleted),
                                             ctx.services.clock())
    except ReplayError:  # another process claimed it first: the same step resent gets that process's result
        return _recorded(ctx, opened)
    except GoneError:
        raise McpError.invalid_params(f"note {note_id!r} no longer exists") from None
    ctx.services.bus.publish("notifications/resources/updated", {"uri": note.uri})
    ctx.services.bus.publish("notifications/resources/list_changed", {})
    return deleted


def _reply(ctx: Context, opened: Opened, result: dict[str, Any]) -> Reply:
    return Reply(_step(ctx), result, opened.expires)


def _consume(ctx: Context, opened: Opened, outcome: str, result: dict[str, Any]) -> None:
    try:
        ctx.services.store.consume_nonce(opened.nonce, outcome, _reply(ctx, opened, result), ctx.services.clock())
    except ReplayError:
        _recorded(ctx, opened)  # the same step resent: its recorded result is this one; else refused


def _listing(ctx: Context) -> list[dict[str, Any]]:
    notes = [n for n in ctx.services.store.notes() if allowed(workspaces(ctx), n.uri)]
    return [{"uri": n.uri, "name": n.title, "mimeType": "text/markdown"} for n in notes]


async def _read(ctx: Context, uri: str) -> dict[str, Any] | None:
    if not uri.startswith("file:"):
        return None
    for note in ctx.services.store.notes():
        if note.uri == uri and allowed(workspaces(ctx), uri):
            return {"contents": [{"uri": uri, "mimeType": "text/markdown", "text": f"# {note.title}\n\n{note.body}"}],
                    "ttlMs": 30_000, "cacheScope": "private"}
    return None


NOTE_RESOURCES = ResourceFamily(_listing, _read, templates=(
    {"uriTemplate": "file:///work/notes/{path}", "name": "note", "mimeType": "text/markdown"},))

TOOLS = (
    Tool("notes_delete", "Delete a note by title inside an allowed workspace, after the user confirms which one.", {
        "type": "object",
        "properties": {"workspaceUri": {"type": "string", "description": "file:// URI of the workspace"},
                       "title": {"type": "string"}},
        "required": ["workspaceUri", "title"]}, notes_delete, title="Delete a note",
        annotations={"destructiveHint": True}),
)
