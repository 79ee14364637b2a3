"""``python -m bench.reverse`` (docs/benchmarks.md): its target's verdict follows the number, and a tiny run
against the official 1.x SDK server reports the three scenarios and the ratios of their medians."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.targets import reverse_targets
from tests.gateway.http.test_doors_sdk1 import sdk1_python  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parents[2]


def test_the_reverse_target_is_met_at_its_limit_and_missed_above_it() -> None:
    target, floor = reverse_targets({})
    for value, met in [(1.0, True), (1.3, True), (1.31, False)]:
        ratios = {"c1": {"reverse_bridged/legacy_direct": value}}
        assert target.read(ratios) == value and target.met(value) is met
    assert target.read({"c32": {"reverse_bridged/legacy_direct": 1.0}}) is None  # not measured at c=1
    # the gateway's part, against the bare-aiohttp floor: reported beside its limit, never a miss
    assert floor.read({"c1": {"reverse_bridged/reverse_floor": 1.2}}) == 1.2 and not floor.met(1.2)
    assert target.judged and not floor.judged


def test_the_reverse_benchmark_reports_the_calls_and_their_ratios(tmp_path: Path,
                                                                  sdk1_python: Path) -> None:  # noqa: F811
    run = subprocess.run([sys.executable, "-m", "bench.reverse", "--duration", "0.4", "--warmup", "0.1", "--slice",
                          "0.2", "--legacy-python", str(sdk1_python)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-2000:]
    names = ("legacy_direct", "reverse_bridged", "reverse_floor")
    rows = {line.split()[0]: line.split() for line in run.stdout.splitlines() if line.startswith(names)}
    assert set(rows) == set(names) and all(int(r[2]) > 0 for r in rows.values())
    p50 = {name: float(row[3]) for name, row in rows.items()}
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("c1:")]
    for ours, theirs in (("reverse_bridged", "legacy_direct"), ("reverse_floor", "legacy_direct"),
                         ("reverse_bridged", "reverse_floor")):
        assert f"{ours} / {theirs} {round(p50[ours] / p50[theirs], 3)}" in line
    assert "target reverse_bridged/legacy_direct median, c=1 <= 1.3" in run.stdout
    assert "target reverse_bridged/reverse_floor median, c=1 <= 1.1" in run.stdout
