"""A 2025 client through the gateway to 2025-only servers, with code we did not write
(docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge, the era matrix's 2025 x 2025 cell):
the official Python ``mcp`` 1.x client (``sdk1_relay_client.py``, in the 1.x venv of test_doors_sdk1) -> the gateway,
its upstream era "auto" decided by serve's start-up probe -> the legacy notes server written with ``mcp`` 1.x
(legacy_sdk1_server.py) or with the TypeScript SDK 1.x (tests/conformance/legacy_notes_server.mjs). The gateway
relays such a client as it is (the server's own session, live requests and GET stream); every flow passes: sampling
(answered and refused), two rounds, form and URL elicitation (accepted, declined, cancelled), roots, progress,
logging, a prompt, a resource and its subscription, and a call cancelled mid-round. All real processes on loopback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.http.keys import REVERSE
from gateway.ops.cli import check_upstream
from gateway.telemetry.report import render_table
from gateway.telemetry.usage import USAGE
from kit.usage_report import ReportBuilder
from tests.gateway.http.test_doors_sdk1 import run_sdk1_script, sdk1_python  # noqa: F401  (a fixture)
from tests.gateway.http.test_reverse_e2e import _legacy_server
from tests.gateway.http.test_reverse_ts import _ts_server
from tests.gateway.telemetry.test_usage_relayed import rows
from tests.waiting import until

CLIENT = Path(__file__).with_name("sdk1_relay_client.py")


async def _gateway(aiohttp_server: Any, url: str) -> Any:
    """The gateway as ``serve --upstream URL`` makes it: the era "auto", decided by the start-up probe."""
    config = load_config(upstream_url=url)
    assert config.upstream_era == "auto"
    _, era, _ = await asyncio.to_thread(check_upstream, config, True)  # the probe runs its own event loop
    assert era == "2025-11-25"
    return await aiohttp_server(create_app(load_config(upstream_url=url, upstream_era=era)))


async def _run_client(python: Path, url: str) -> dict[str, Any]:
    return await run_sdk1_script(python, CLIENT, url)


@contextlib.contextmanager
def _server(kind: str, python: Path) -> Iterator[str]:
    """The legacy notes server of ``kind`` (its twins answer alike), on loopback: its /mcp URL."""
    if kind == "typescript":
        with _ts_server() as url:
            yield url
    else:
        with _legacy_server(python) as (url, _):
            yield url


TOOLS = ["ask_model", "cancelled", "chatty", "count", "delete_note", "echo", "levels", "open_link", "show_roots",
         "slow", "subscribed", "touch", "two_rounds"]
SAMPLE, FORM, URL = "sampling/createMessage", "elicitation/create (form)", "elicitation/create (url)"


def _call(text: str, *asked: str, error: bool = False, logged: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"text": text, "isError": error, "asked": list(asked), "logged": list(logged)}


def expected(kind: str) -> dict[str, Any]:
    """Each flow's outcome as the 1.x client saw it, and the requests the server sent it meanwhile (roots/list
    too: the Python server sends it on the session's GET stream, the TypeScript one on the call's stream)."""
    refused = "Error executing tool ask_model: " if kind == "python" else "MCP error -1: "  # each SDK's wording
    info = "an info line" if kind == "python" else "a info line"
    out: dict[str, Any] = {
        "initialize": {"protocolVersion": "2025-11-25",
                       "server": "legacy-notes" if kind == "python" else "legacy-notes-ts"},
        "ping": {},
        "listed": {"tools": TOOLS, "prompts": ["greet"], "resources": ["notes://readme"]},
        "echo": _call("plain"),
        "ask_model": _call("model said: <about owls>", SAMPLE),
        "ask_model refused": _call(refused + "the user refused to sample", SAMPLE, error=True),
        "two_rounds": _call("<first> then <second after <first>>", SAMPLE, SAMPLE),
        "delete_note accept": _call("deleted n1", FORM),
        "delete_note decline": _call("decline: nothing deleted", FORM),
        "delete_note cancel": _call("cancel: nothing deleted", FORM),
        "delete_note accept, keep": _call("kept n1", FORM),
        "open_link accept": _call("accept: link opened", URL),
        "open_link decline": _call("decline: not shared", URL),
        "open_link cancel": _call("cancel: not shared", URL),
        "show_roots": _call("file:///work/a", "roots/list"),
        "count": {**_call("counted 2, <go on>", SAMPLE), "progress": [1, 2, 3]},
        # neither 1.x server filters its tools' messages by the level (logging/setLevel reached it: "levels")
        "chatty": {**_call("said", logged=("debug: a debug line", f"info: {info}", "warning: a warning line")),
                   "levels": "info"},
        "greet": "Say hello to Ada.",
        "readme": "the readme",
        "subscription": {"subscribed": "notes://readme", "after unsubscribe": "",
                         "heard": ["resources/updated notes://readme", "tools/list_changed"]},
        "cancel": {"cancel sent": True, "asked": [SAMPLE], "cancelled": "ask_model"},
        "echo after": _call("still here"),
    }
    return out


@pytest.mark.parametrize("kind", ["python", "typescript"])
async def test_every_flow_of_the_sdk1_client_is_relayed_to_the_legacy_server(
        aiohttp_server: Any, sdk1_python: Path, kind: str) -> None:  # noqa: F811
    with _server(kind, sdk1_python) as url:
        gateway = await _gateway(aiohttp_server, url)
        summary = await _run_client(sdk1_python, str(gateway.make_url("/mcp")))
        assert summary == expected(kind)
        bridge = gateway.app[REVERSE]
        assert not bridge.pool and not bridge.parked  # the server's own session: none of the bridge's



def _calls_by_kinds(table: list[dict[str, Any]]) -> dict[str, int]:
    """The relayed tools/call records by the input kinds they carry."""
    calls: dict[str, int] = {}
    for row in table:
        if row["method"] == "tools/call" and row["inputs"]:
            calls[row["inputs"]] = calls.get(row["inputs"], 0) + row["count"]
    return calls


@pytest.mark.parametrize("kind", ["python", "typescript"])
async def test_the_usage_report_names_the_server_requests_relayed_clients_reach(
        aiohttp_server: Any, sdk1_python: Path, kind: str, tmp_path: Path) -> None:  # noqa: F811
    """docs/design/eras.md#relayed-2025-requests-are-counted-in-the-usage-report: each relayed call's record
    carries the kinds of the requests the server sent on its stream (as the client saw them asked, above), and the
    report's relayed section sums them by upstream. The Python server sends its ``roots/list`` on the session's GET
    stream, which is no request's record: only the TypeScript server's (on the call's stream) is counted."""
    db = str(tmp_path / "usage.db")
    roots = {"roots": 1} if kind == "typescript" else {}
    # sampling: ask_model, refused, two_rounds, count and the call cancelled at its sampling request
    reached = {"sampling": 5, "elicitation.form": 4, "elicitation.url": 3, **roots}
    with _server(kind, sdk1_python) as url:
        config = load_config(upstream_url=url, upstream_era="2025-11-25", state_dir=str(tmp_path / "state"),
                             usage={"db": db, "flush_seconds": 3600})
        gateway = await aiohttp_server(create_app(config))
        assert await _run_client(sdk1_python, str(gateway.make_url("/mcp"))) == expected(kind)

        async def recorded() -> bool:  # a call is recorded once its relayed stream ended, maybe after the client
            await gateway.app[USAGE].flush()
            return _calls_by_kinds(rows(db)) == reached
        await until(recorded, "every relayed call asked by the server recorded", lambda: rows(db))
    table = rows(db)
    assert {(r["era"], r["translated"], r["upstream"]) for r in table} == {("legacy", 0, "default")}
    assert not [r for r in table if r["method"] != "tools/call" and r["inputs"]]
    assert [r for r in table if r["method"] == "tools/call" and not r["inputs"]]  # echo, chatty, ...
    features = {f for r in table if r["inputs"] for f in r["features"].split(",")}
    assert features == {"legacy handshake", "sampling", "elicitation url ids", *roots}
    builder = ReportBuilder()
    for row in table:
        builder.add(row)
    report = {**builder.finish("2026-12-02", 1, {}), "window": "1d"}
    assert [(u["upstream"], u["inputs"]) for u in report["relayed"]] == [("default", reached)]
    section = render_table(report).split("legacy clients -> legacy servers (relayed as they are)\n")[1]
    said = ", ".join(f"{k} {v}" for k, v in reached.items())
    assert section.splitlines()[1] == f"    legacy features reached: {said}"
