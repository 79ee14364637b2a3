"""The load check runs end to end (2 sessions x 2 s): every call answered with its own nonce, none lost or
cross-wired, RSS read. No timing is asserted (docs/benchmarks.md: tests never do)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_load_check_runs_and_accounts_for_every_call(tmp_path: Path) -> None:
    # cwd is the temp dir: whatever a child might write lands there, never in the checkout.
    run = subprocess.run([sys.executable, "-m", "bench.load", "--sessions", "2", "--duration", "2"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    counts = re.search(r"calls (\d+) errors (\d+) lost (\d+) cross-wired (\d+)", run.stdout)
    assert counts and int(counts[1]) > 0 and counts.groups()[1:] == ("0", "0", "0"), run.stdout
    assert re.search(r"latency ms: p50 [\d.]+ p99 [\d.]+", run.stdout), run.stdout
    rss = re.search(r"gateway RSS MiB: before ([\d.]+) after ([\d.]+)", run.stdout)
    assert rss and float(rss[1]) > 0 and float(rss[2]) > 0, run.stdout


def _haproxy() -> bool:
    from bench.balancer import haproxy_binary
    from bench.redis_side import resolve_url

    return haproxy_binary() is not None and resolve_url(None) is not None


@pytest.mark.skipif(not _haproxy(), reason="needs haproxy and a Redis")
def test_the_load_check_through_replicas_killed_under_it(tmp_path: Path) -> None:
    # Three gateways on Redis behind haproxy, one SIGKILLed and restarted after 1 s: every call still answered
    # with its own nonce (a killed replica's calls resumed or sent again by the client), beside the single run.
    run = subprocess.run([sys.executable, "-m", "bench.load", "--sessions", "3", "--duration", "2.5", "--replicas",
                          "3", "--kill-every", "1"], capture_output=True, text=True, timeout=180, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    replicas = re.search(r"replicas: .*\((\d+) killed\): calls (\d+) errors (\d+) lost (\d+) cross-wired (\d+)",
                         run.stdout)
    assert replicas and int(replicas[1]) >= 1 and int(replicas[2]) > 0, run.stdout
    assert replicas.groups()[2:] == ("0", "0", "0"), run.stdout
    assert re.search(r"replicas latency ms: p50 [\d.]+ p99 [\d.]+ \(one gateway: p50 [\d.]+ p99 [\d.]+\)",
                     run.stdout), run.stdout
    assert re.search(r"replicas recovered: streams resumed \d+ calls sent again \d+ answers sent again \d+",
                     run.stdout), run.stdout
