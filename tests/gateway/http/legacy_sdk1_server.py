"""A 2025-11-25-only server written with the official ``mcp`` 1.x SDK (FastMCP, stateful Streamable HTTP), run
in the 1.x venv by tests/gateway/http/test_reverse_e2e.py: ``python legacy_sdk1_server.py PORT``.

Its tools ask their client live, as deployed 1.x servers do: sampling and elicitation on the call's own stream,
``roots/list`` on the session's GET stream (the 1.x SDK sends it with no related request)."""

from __future__ import annotations

import sys

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.lowlevel.server import NotificationOptions
from mcp.types import SamplingMessage, TextContent
from pydantic import AnyUrl, BaseModel

app = FastMCP("legacy-notes", instructions="A 2025-era notes server.", host="127.0.0.1", port=int(sys.argv[1]))


CANCELLED: list[str] = []  # the tools whose call a notifications/cancelled ended, in order
SUBSCRIBED: dict[object, set[str]] = {}  # each session's resources/subscribe URIs
LEVELS: list[str] = []  # every logging/setLevel, in order
_options = app._mcp_server.create_initialization_options


def _initialization_options(*args: object, **kwargs: object) -> object:
    """list_changed for every list, and resources/subscribe, as a 1.x server that sends them declares."""
    options = _options(NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True))
    assert options.capabilities.resources is not None
    options.capabilities.resources.subscribe = True
    return options


app._mcp_server.create_initialization_options = _initialization_options  # type: ignore[method-assign]


@app._mcp_server.subscribe_resource()
async def _subscribe(uri: AnyUrl) -> None:
    SUBSCRIBED.setdefault(app._mcp_server.request_context.session, set()).add(str(uri))


@app._mcp_server.unsubscribe_resource()
async def _unsubscribe(uri: AnyUrl) -> None:
    SUBSCRIBED.get(app._mcp_server.request_context.session, set()).discard(str(uri))


@app._mcp_server.set_logging_level()
async def _set_level(level: str) -> None:
    LEVELS.append(level)


@app.tool()
async def touch(uri: str) -> str:
    """resources/updated to every session subscribed to ``uri``, then list_changed of tools to every session that
    subscribed to anything (all on their GET streams)."""
    for session, uris in list(SUBSCRIBED.items()):
        try:
            if any(uri == u or uri.startswith(u.rstrip("/") + "/") for u in uris):
                await session.send_resource_updated(AnyUrl(uri))
            await session.send_tool_list_changed()
        except Exception:  # a session that ended meanwhile
            SUBSCRIBED.pop(session, None)
    return "touched"


@app.tool()
def subscribed() -> str:
    return ",".join(sorted(u for uris in SUBSCRIBED.values() for u in uris))


@app.tool()
async def chatty(ctx: Context) -> str:
    """One log message of each of three levels, on the call's own stream."""
    await ctx.debug("a debug line")
    await ctx.info("an info line")
    await ctx.warning("a warning line")
    return "said"


@app.tool()
def levels() -> str:
    return ",".join(LEVELS)


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
        await anyio.sleep(30)  # sleep: works for long, until its client hangs up
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
async def open_link(note: str, ctx: Context) -> str:
    """A URL elicitation (2025-11-25 client/elicitation, URL mode): accept, decline or cancel."""
    answer = await ctx.elicit_url(f"Sign in to share {note}", f"https://notes.example/share/{note}", f"share-{note}")
    return f"{answer.action}: {'link opened' if answer.action == 'accept' else 'not shared'}"


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
