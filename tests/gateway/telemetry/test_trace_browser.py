"""The trace page (``python -m gateway trace FILE --html OUT``) in a real headless browser, Debian's Chromium driven
over the DevTools protocol like the /migration test: the page of a real bridged call's trace renders a sequence
diagram per request with one drawn arrow per record, its rounds banded and its errors red, and fetches nothing."""

from __future__ import annotations

import base64
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.telemetry.trace import Tracer
from tests.gateway.browser import chromium_page, needs_chromium
from tests.gateway.conftest import Legacy, gateway_cli
from tests.gateway.http.test_bridge_shell import SAMPLED, two_rounds

pytestmark = needs_chromium

READ_DIAGRAMS = """JSON.stringify({
  scripts: document.scripts.length,
  requests: [...document.querySelectorAll('section.request')].map(s => ({
    corr: s.dataset.corr, failed: s.classList.contains('failed'),
    lanes: [...s.querySelectorAll('line.lane')].map(l => l.getBoundingClientRect().height),
    rounds: [...s.querySelectorAll('g.round text')].map(t => t.textContent),
    arrows: [...s.querySelectorAll('g.arrow')].map(g => {
      const line = g.querySelector('line'), box = line.getBoundingClientRect();
      return {error: g.classList.contains('error'), width: box.width, y: box.top,
              stroke: getComputedStyle(line).stroke, head: line.getAttribute('marker-end'),
              label: g.querySelector('text').textContent};
    })}))})"""


async def _traced(upstream: Any, aiohttp_client: Any, path: Path) -> None:
    """A tools/call bridged over two input rounds, and one the upstream refuses with an error."""
    upstream.script["tools/call"] = lambda body, request: two_rounds(body, request) \
        if body["params"]["name"] == "t" else ("error", {"code": -32602, "message": "no such tool"})
    tracer = Tracer(path, max_bytes=1 << 20)
    legacy = Legacy(await aiohttp_client(create_app(load_config(upstream_url=upstream.url), tap=tracer)))
    await legacy.initialize()
    resp = await legacy.post("tools/call", {"name": "t", "arguments": {}})
    await legacy.next_event(resp)  # priming
    for asked in (2, 1):
        for ask in [(await legacy.next_event(resp))[1] for _ in range(asked)]:
            assert ask is not None and await legacy.answer(ask["id"], SAMPLED) == 202
    assert "result" in (await legacy.next_event(resp))[1]  # type: ignore[operator]
    assert "error" in await legacy.call("tools/call", {"name": "missing", "arguments": {}})
    await legacy.client.close()
    tracer.close()


async def _drawn(page_file: Path, profile: Path) -> tuple[dict[str, Any], list[str], bytes]:
    """What Chromium drew (read back from the DOM), every URL the page requested, and a screenshot."""
    async with chromium_page(profile) as cdp:
        await cdp.send("Network.enable")
        await cdp.send("Page.enable")
        await cdp.send("Page.navigate", url=page_file.as_uri())
        requested = []
        while True:
            event = await cdp.wait_for_any("Network.requestWillBeSent", "Page.loadEventFired")
            if event["method"] == "Page.loadEventFired":
                break
            requested.append(event["params"]["request"]["url"])
        drawn = json.loads((await cdp.send("Runtime.evaluate", expression=READ_DIAGRAMS,
                                           returnByValue=True))["result"]["value"])
        shot = await cdp.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    return drawn, requested, base64.b64decode(shot["data"])


async def test_the_trace_page_draws_every_message_as_an_arrow(upstream, aiohttp_client, tmp_path: Path) -> None:
    trace, page = tmp_path / "trace.jsonl", tmp_path / "trace.html"
    await _traced(upstream, aiohttp_client, trace)
    code, _out, err = await gateway_cli(tmp_path, "trace", str(trace), "--html", str(page))
    assert code == 0, err
    drawn, requested, shot = await _drawn(page, tmp_path / "profile")
    artifacts = Path(os.environ.get("ARTIFACTS_DIR") or tmp_path)  # never the checkout
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "trace-page.png").write_bytes(shot)
    print(f"\nscreenshot artifact: {artifacts / 'trace-page.png'}")

    assert requested == [page.as_uri()] and drawn["scripts"] == 0  # self-contained: nothing else fetched
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    per_request = Counter(r["corr"] for r in records)
    by_corr = {r["corr"]: r for r in drawn["requests"]}
    assert set(by_corr) == set(per_request)
    for corr, count in per_request.items():  # the arrow count matches the trace, every arrow drawn
        arrows = by_corr[corr]["arrows"]
        assert len(arrows) == count, corr
        assert all(a["width"] > 100 and a["head"] == "url(#head)" for a in arrows)
        assert [a["y"] for a in arrows] == sorted(a["y"] for a in arrows)  # one row each, in order
        assert len(by_corr[corr]["lanes"]) == 3 and min(by_corr[corr]["lanes"]) > 0
    bridged = next(r for r in drawn["requests"] if any("sampling/createMessage" in a["label"] for a in r["arrows"]))
    assert bridged["rounds"] == ["round 0", "round 1", "round 2"] and not bridged["failed"]
    failed = next(r for r in drawn["requests"] if r["failed"])
    red = [a for a in failed["arrows"] if a["error"]]
    assert red and all(a["stroke"] == "rgb(204, 0, 0)" for a in red)
    assert all(a["stroke"] != "rgb(204, 0, 0)" for a in bridged["arrows"])
    assert len(shot) > 1000
