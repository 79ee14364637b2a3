"""The Redis round trips of a two-round bridged call, counted by the benchmark's own seam
(``bench.balancer.store_trips``: two gateways on one prefix behind a proxy that counts every write to Redis). A
count, not a timing: the same on any machine. Six is the budget (docs/benchmarks.md "Replicas behind a balancer"):
a round that starts waiting is counted in the store by its first save, not by a round trip of its own; answers
posted to another replica add one each."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.bench.test_bench import REDIS_URL, _redis_answers

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not _redis_answers(REDIS_URL), reason=f"no Redis at {REDIS_URL}")
def test_a_two_round_bridged_call_costs_at_most_six_store_round_trips(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import aiohttp

    from bench.balancer import store_trips
    from bench.procs import Child

    monkeypatch.chdir(tmp_path)  # whatever a child might write lands here, never in the checkout
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

    async def count() -> dict[str, float]:
        core = Child("core", ["-m", "modern_server", "--port", "{port}", "--no-access-log"])
        try:
            async with aiohttp.ClientSession() as http:
                return await store_trips(http, REDIS_URL, core.url, [])
        finally:
            core.stop()

    trips = asyncio.run(count())
    assert trips["one replica"] <= 6, trips
    # A relayed answer costs one round trip more, the owner's lookup and the publish in one script
    # (docs/design/replicas.md#replicas-relay-through-the-store): no session read where it lands (the record read
    # last), no publish of the owner's acknowledgement (its save sends it). Two answers: 8 (it was 13).
    assert trips["answers on another replica"] <= trips["one replica"] + 2, trips
