"""The ``draft_note`` prompt: ``prompts/get`` that elicits a value through MRTR, plus completion for ``topic``."""

from __future__ import annotations

from typing import Any

import mcp_types
from pydantic import ValidationError

from modern_server.errors import McpError
from modern_server.framework import Context, Prompt, input_required, next_round
from modern_server.tools.notes import workspaces

KEY = "tone"
TONES = ("casual", "formal", "terse")


def _bound(ctx: Context) -> dict[str, Any]:
    return {"name": ctx.params["name"], "arguments": dict(ctx.params.get("arguments") or {})}


def _ask(ctx: Context, round_no: int) -> dict[str, Any]:
    request = {"method": "elicitation/create", "params": {
        "mode": "form", "message": "Which tone should the note have?",
        "requestedSchema": {"type": "object", "properties": {"tone": {"type": "string", "enum": list(TONES)}},
                            "required": ["tone"]}}}
    return input_required({KEY: request}, ctx.seal(_bound(ctx), "tone", {"round": round_no}))


def _tone(answer: Any) -> str:
    try:
        mcp_types.ElicitResult.model_validate(answer)
    except ValidationError:
        raise McpError.invalid_params("inputResponses.tone is not an ElicitResult") from None
    if answer["action"] != "accept":
        return "neutral"  # declining the question is an answer: the prompt falls back to a neutral tone
    tone = (answer.get("content") or {}).get("tone")
    if tone not in TONES:
        raise McpError.invalid_params(f"tone must be one of {list(TONES)}")
    return tone


async def draft_note(ctx: Context) -> dict[str, Any]:
    topic = (ctx.params.get("arguments") or {}).get("topic")
    if not isinstance(topic, str) or not topic:
        raise McpError.invalid_params("argument topic is required")
    ctx.require(ctx.declares_form_elicitation(), {"elicitation": {"form": {}}}, "draft_note asks for the tone")
    opened = ctx.open_state(_bound(ctx))
    round_no = next_round(ctx, opened)
    answer = ctx.input_responses().get(KEY)
    if opened is None or answer is None:
        return _ask(ctx, round_no)
    tone = _tone(answer)
    text = f"Write a short {tone} note about {topic}."
    return {"description": f"A {tone} note about {topic}",
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}]}


def _complete(ctx: Context, argument: str, value: str) -> list[str]:
    if argument != "topic":
        return []
    titles = {n.title for n in ctx.services.store.notes()
              if any(n.uri.startswith(w.rstrip("/") + "/") for w in workspaces(ctx))}
    return sorted(t for t in titles if t.lower().startswith(value.lower()))


PROMPTS = (
    Prompt("draft_note", "Draft a note about a topic; asks which tone to use.",
           ({"name": "topic", "description": "what the note is about", "required": True},), draft_note, _complete),
)
