"""``GET /migration`` in a real headless browser: Debian's Chromium driven over the DevTools protocol
(the ``websockets`` dependency, no Playwright download). Loads the page through the one-time ``?token=`` step,
reads the drawn charts back from the DOM (numbers and on-screen sizes), and keeps a screenshot as an artifact
in the test's temporary directory, or under ``ARTIFACTS_DIR`` when set (its path is printed)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from gateway.config.settings import load_config
from gateway.http.app import create_app
from tests.gateway.browser import chromium_page, needs_chromium
from tests.gateway.telemetry.test_usage_e2e import info, legacy_script, modern_script

ROOT = Path(__file__).resolve().parents[3]
pytestmark = needs_chromium


READ_CHARTS = """JSON.stringify({
  summary: document.querySelector('#summary').dataset.daysUntilRemoval,
  peers: [...document.querySelectorAll('section.peer')].map(s => ({
    peer: s.dataset.peer, verdict: s.querySelector('.verdict').textContent,
    share: (c => ({legacy: +c.dataset.legacy, modern: +c.dataset.modern,
                   width: c.getBoundingClientRect().width,
                   bars: [...c.querySelectorAll('rect.bar')].filter(r => +r.dataset.count > 0).map(r => ({
                     kind: r.classList[1], day: r.dataset.day, count: +r.dataset.count,
                     height: r.getBoundingClientRect().height}))}))(s.querySelector('svg.chart.share')),
    features: [...s.querySelectorAll('svg.chart.features rect.bar')].map(r => ({
      feature: r.dataset.feature, count: +r.dataset.count, width: r.getBoundingClientRect().width})),
    failures: [...s.querySelectorAll('svg.chart.failures rect.bar')].map(r => ({
      cause: r.dataset.failure, count: +r.dataset.count, width: r.getBoundingClientRect().width})),
    clients: [...s.querySelectorAll('tr.client')].map(r => [r.dataset.client, r.dataset.verdict])}))})"""


async def test_the_dashboard_renders_the_right_numbers(aiohttp_server, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TEST_DASHBOARD_TOKEN", "t0ken-for-browser")
    config = load_config(sse_retry_ms=50, usage={"db": str(tmp_path / "usage.db"), "flush_seconds": 3600,
                                                 "admin_token_env": "TEST_DASHBOARD_TOKEN"})
    server = await aiohttp_server(create_app(config))
    await legacy_script(str(server.make_url("/mcp")))
    await modern_script(str(server.make_url("/mcp")))
    async with Client(str(server.make_url("/mcp")), mode="legacy", client_info=info("no-sampling")) as client:
        with pytest.raises(MCPError):  # declared no sampling: a "missing capability" failure
            await client.call_tool("summarize_repo", {"repo": "demo"})
    async with chromium_page(tmp_path / "profile") as cdp:
        await cdp.send("Page.enable")
        await cdp.send("Page.navigate", url=str(server.make_url("/migration?token=t0ken-for-browser")))
        await cdp.wait_for("Page.loadEventFired")
        location = await cdp.send("Runtime.evaluate", expression="location.href", returnByValue=True)
        drawn = json.loads((await cdp.send("Runtime.evaluate", expression=READ_CHARTS,
                                           returnByValue=True))["result"]["value"])
        shot = await cdp.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    artifacts = Path(os.environ.get("ARTIFACTS_DIR") or tmp_path)  # never the checkout
    artifacts.mkdir(parents=True, exist_ok=True)
    artifact = artifacts / "migration-dashboard.png"
    artifact.write_bytes(base64.b64decode(shot["data"]))
    print(f"\nscreenshot artifact: {artifact}")

    assert "token" not in location["result"]["value"]  # exchanged for the cookie and redirected away
    (peer,) = drawn["peers"]
    assert peer["peer"] == "default"
    assert peer["verdict"] == "blocked by: legacy handshake, sampling, roots, logging/setLevel, ping"
    assert (peer["share"]["legacy"], peer["share"]["modern"]) == (11, 5) and peer["share"]["width"] > 0
    bars = {b["kind"]: b for b in peer["share"]["bars"]}
    assert bars["legacy"]["count"] == 11 and bars["modern"]["count"] == 5
    assert bars["legacy"]["height"] > bars["modern"]["height"] > 0  # drawn to scale: 11 vs 5
    features = {f["feature"]: f for f in peer["features"]}
    assert {k: f["count"] for k, f in features.items()} == {
        "legacy handshake": 11, "sampling": 3, "roots": 1, "logging/setLevel": 1, "ping": 1}
    assert features["legacy handshake"]["width"] > features["sampling"]["width"] > features["ping"]["width"] > 0
    assert [(f["cause"], f["count"]) for f in peer["failures"]] == [("missing capability", 1)]
    assert peer["failures"][0]["width"] > 0
    assert dict(peer["clients"]) == {
        "agent": "blocked by: sampling", "no-sampling": "blocked by: legacy handshake",
        "ide-plugin": "blocked by: legacy handshake, sampling, roots, logging/setLevel, ping"}
    assert int(drawn["summary"]) > 0
    assert artifact.stat().st_size > 1000
