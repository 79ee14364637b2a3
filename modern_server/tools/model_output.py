"""Reading what the client's model said: sampling results are untrusted input (client/sampling §Security).

Every ``inputResponses`` value for a ``sampling/createMessage`` request is validated against the official
``CreateMessageResult`` type, bounded in size, and its text extracted; anything else is -32602.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types
from pydantic import ValidationError

from modern_server.errors import McpError


def sampled_text(response: Any, limit: int) -> str:
    try:
        mcp_types.CreateMessageResult.model_validate(response)
    except ValidationError:
        raise McpError.invalid_params("the sampling response is not a CreateMessageResult") from None
    content = response["content"]
    blocks = content if isinstance(content, list) else [content]
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    if len(text.encode("utf-8")) > limit:
        raise McpError.invalid_params(f"the model's answer exceeds {limit} bytes")
    if not text.strip():
        raise McpError.invalid_params("the model's answer has no text")
    return text


def chosen_files(text: str, candidates: tuple[str, ...], count: int) -> list[str]:
    """The model must answer a JSON array of ``count`` distinct paths, each from the candidate list."""
    try:
        picked = json.loads(text)
    except ValueError:
        raise McpError.invalid_params("the model's file choice is not valid JSON") from None
    if not isinstance(picked, list) or not all(isinstance(p, str) for p in picked):
        raise McpError.invalid_params("the model's file choice must be a JSON array of paths")
    if len(picked) != count or len(set(picked)) != count:
        raise McpError.invalid_params(f"the model must choose exactly {count} distinct files")
    outside = [p for p in picked if p not in candidates]
    if outside:
        raise McpError.invalid_params(f"the model chose paths outside the candidate set: {outside}")
    return picked
