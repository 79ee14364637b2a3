"""Headless Chromium for the browser tests: Debian's ``chromium`` driven over the DevTools protocol (no
Selenium or Playwright: one websocket and a few commands), a fresh profile per page, the process always ended."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.waiting import until

CHROMIUM = "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                    reason=f"{CHROMIUM} is absent (apt-get install -y chromium; .ci/run does it)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--window-size=1100,1400"]


class Cdp:
    """The smallest DevTools-protocol client: commands by id, events into a queue, one flattened page session."""

    def __init__(self, ws: Any) -> None:
        self.ws, self.ids, self.pending, self.events = ws, itertools.count(1), {}, asyncio.Queue()
        self.reader = asyncio.get_running_loop().create_task(self._read())
        self.session: str | None = None

    async def _read(self) -> None:
        async for raw in self.ws:
            message = json.loads(raw)
            future = self.pending.pop(message.get("id"), None)
            if future is not None:
                future.set_result(message)
            elif "method" in message:
                self.events.put_nowait(message)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        body: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            body["sessionId"] = self.session
        self.pending[ident] = future = asyncio.get_running_loop().create_future()
        await self.ws.send(json.dumps(body))
        message = await asyncio.wait_for(future, 30)
        assert "error" not in message, message
        return message["result"]

    async def wait_for(self, method: str) -> dict[str, Any]:
        return await self.wait_for_any(method)

    async def wait_for_any(self, *methods: str) -> dict[str, Any]:
        while True:
            event = await asyncio.wait_for(self.events.get(), 30)
            if event["method"] in methods:
                return event


async def devtools_url(profile: Path, proc: subprocess.Popen) -> str:
    marker = profile / "DevToolsActivePort"

    def written() -> list[str]:
        assert proc.poll() is None, "chromium exited early"
        lines = marker.read_text().splitlines() if marker.exists() else []
        return lines[:2] if len(lines) >= 2 else []
    port, path = await until(written, "chromium opens its DevTools port", seconds=30)
    return f"ws://127.0.0.1:{port}{path}"


@asynccontextmanager
async def chromium_page(profile: Path) -> AsyncIterator[Cdp]:
    """A blank page in a new headless Chromium with its own profile folder (removed after), attached."""
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with websockets.connect(await devtools_url(profile, proc), max_size=None) as ws:
            cdp = Cdp(ws)
            target = await cdp.send("Target.createTarget", url="about:blank")
            attached = await cdp.send("Target.attachToTarget", targetId=target["targetId"], flatten=True)
            cdp.session = attached["sessionId"]
            try:
                yield cdp
            finally:
                cdp.reader.cancel()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)
