"""A 2025-11-25-only server written with the official ``mcp`` 1.x SDK (FastMCP, stateful Streamable HTTP), run
in the 1.x venv by tests/gateway/http/test_reverse_e2e.py: ``python legacy_sdk1_server.py PORT``.

Its tools ask their client live, as deployed 1.x servers do: sampling and elicitation on the call's own stream,
``roots/list`` on the session's GET stream (the 1.x SDK sends it with no related request)."""

from __future__ import annotations

import sys

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.types import SamplingMessage, TextContent
from pydantic import BaseModel

app = FastMCP("legacy-notes", instructions="A 2025-era notes server.", host="127.0.0.1", port=int(sys.argv[1]))


CANCELLED: list[str] = []  # the tools whose call a notifications/cancelled ended, in order


class Confirm(BaseModel):
    confirm: bool


def _ask(text: str) -> list[SamplingMessage]:
    return [SamplingMessage(role="user", content=TextContent(type="text", text=text))]


def _text(result: object) -> str:
    content = getattr(result, "content", None)
    return getattr(content, "text", "?")


@app.tool()
async def ask_model(topic: str, ctx: Context) -> str:
    """One sampling round."""
    try:
        answer = await ctx.session.create_message(_ask(f"about {topic}"), max_tokens=20,
                                                  related_request_id=ctx.request_id)
    except anyio.get_cancelled_exc_class():
        CANCELLED.append("ask_model")
        raise
    return f"model said: {_text(answer)}"


@app.tool()
async def slow() -> str:
    """Works for long: for a client that hangs up."""
    try:
        await anyio.sleep(30)
    except anyio.get_cancelled_exc_class():
        CANCELLED.append("slow")
        raise
    return "done"


@app.tool()
def cancelled() -> str:
    return ",".join(CANCELLED)


@app.tool()
async def two_rounds(ctx: Context) -> str:
    """Two sampling rounds, the second built on the first."""
    first = await ctx.session.create_message(_ask("first"), max_tokens=20, related_request_id=ctx.request_id)
    second = await ctx.session.create_message(_ask(f"second after {_text(first)}"), max_tokens=20,
                                              related_request_id=ctx.request_id)
    return f"{_text(first)} then {_text(second)}"


@app.tool()
async def delete_note(note: str, ctx: Context) -> str:
    """A form elicitation: accept, decline or cancel."""
    answer = await ctx.elicit(f"Delete {note}?", Confirm)
    if answer.action == "accept":
        return f"deleted {note}" if answer.data.confirm else f"kept {note}"
    return f"{answer.action}: nothing deleted"


@app.tool()
async def show_roots(ctx: Context) -> str:
    """roots/list, sent on the session's GET stream."""
    roots = await ctx.session.list_roots()
    return ", ".join(str(root.uri) for root in roots.roots)


@app.tool()
async def count(n: int, ctx: Context) -> str:
    """Progress, then a sampling round, then progress again."""
    for i in range(n):
        await ctx.report_progress(i + 1, n + 1)
    said = await ctx.session.create_message(_ask("go on"), max_tokens=5, related_request_id=ctx.request_id)
    await ctx.report_progress(n + 1, n + 1)
    return f"counted {n}, {_text(said)}"


@app.tool()
def echo(text: str) -> str:
    return text


@app.prompt()
def greet(name: str) -> str:
    return f"Say hello to {name}."


@app.resource("notes://readme")
def readme() -> str:
    return "the readme"


if __name__ == "__main__":
    app.run(transport="streamable-http")
