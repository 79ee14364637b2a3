"""The load check runs end to end (2 sessions x 2 s): every call answered with its own nonce, none lost or
cross-wired, RSS read. No timing is asserted (docs/benchmarks.md: tests never do)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
