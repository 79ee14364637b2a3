"""``summarize_repo``: two sampling rounds through MRTR (basic/patterns/mrtr; client/sampling).

Round 1 asks the client's model (key ``pick_files``) to choose three files from a deterministic list; round 2
asks (key ``summary``) for a summary of those files, the validated choice riding in the sealed state; round 3
completes. Every round is its own request with its own id: all the flow needs is in the state.
"""

from __future__ import annotations

from typing import Any

from modern_server.framework import Context, Tool, bound_call, input_required, next_round, text_result
from modern_server.tools.model_output import chosen_files, sampled_text

PICK, SUMMARY = "pick_files", "summary"


def _sampling(prompt: str, max_tokens: int) -> dict[str, Any]:
    return {"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "systemPrompt": "You are a careful code reviewer. Answer exactly in the format asked for.",
        "includeContext": "none",  # the other values are deprecated (2026-07-28 §Deprecated)
        "modelPreferences": {"hints": [{"name": "claude"}, {"name": "gpt"}], "intelligencePriority": 0.6,
                             "speedPriority": 0.4, "costPriority": 0.3},
        "maxTokens": max_tokens,
    }}


def _ask_pick(ctx: Context, files: tuple[str, ...], round_no: int) -> dict[str, Any]:
    listing = "\n".join(files)
    prompt = f"Choose the three files that best explain this repository. Reply with a JSON array of paths.\n{listing}"
    state = ctx.seal(bound_call(ctx), "pick", {"round": round_no})
    return input_required({PICK: _sampling(prompt, 200)}, state)


def _ask_summary(ctx: Context, picked: list[str], round_no: int) -> dict[str, Any]:
    prompt = "Summarize the repository in three sentences, based on: " + ", ".join(picked)
    state = ctx.seal(bound_call(ctx), "summarize", {"round": round_no, "files": picked})
    return input_required({SUMMARY: _sampling(prompt, 400)}, state)


async def summarize_repo(ctx: Context) -> dict[str, Any]:
    ctx.require(ctx.declares("sampling"), {"sampling": {}}, "summarize_repo needs the client's model (sampling)")
    opened = ctx.open_state(bound_call(ctx))
    round_no = next_round(ctx, opened)
    files, limit = ctx.services.config.repo_files, ctx.services.config.max_model_output_bytes
    responses = ctx.input_responses()
    if opened is None or (opened.phase == "pick" and PICK not in responses):
        return _ask_pick(ctx, files, round_no)  # mrtr: a missing answer is asked again, not an error
    if opened.phase == "pick":
        picked = chosen_files(sampled_text(responses[PICK], limit), files, 3)
        return _ask_summary(ctx, picked, round_no)
    picked = list(opened.values["files"])
    if SUMMARY not in responses:
        return _ask_summary(ctx, picked, round_no)
    summary = sampled_text(responses[SUMMARY], limit)
    return text_result(f"Files: {', '.join(picked)}\n\n{summary}", {"files": picked, "summary": summary})


TOOLS = (
    Tool("summarize_repo", "Summarize the repository with the client's model: it picks three files, then summarizes.",
         {"type": "object", "properties": {"repo": {"type": "string", "description": "display name only"}}},
         summarize_repo, title="Summarize repository",
         output_schema={"type": "object", "properties": {"files": {"type": "array", "items": {"type": "string"}},
                                                         "summary": {"type": "string"}},
                        "required": ["files", "summary"]}),
)
