"""Tests do not synchronise on the clock: a bare sleep under tests/ needs a reason, and few may lack one.

A sleep with a non-zero delay is "bare" unless a ``# sleep: <why>`` comment sits on its line or on the line just
above it: the marker is for the sleeps that are part of a scenario (a fake server that never answers, a token
that must really expire), not for waiting until something has happened, which is what ``tests/waiting.py`` is for.
The few sleeps still used to synchronise (at most ``LIMIT``) say in a ``# sync:`` comment what they wait for.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
LIMIT = 5  # sleeps still used to synchronise, each waiting for a rewrite

SLEEP = re.compile(r"\b(?:asyncio|time|trio|anyio)\.sleep\(\s*(?P<arg>[^)]*)"  # in Python
                   r"|\[\s*[\"']sleep[\"'],\s*[\"'](?P<cmd>[^\"']*)")  # the sleep(1) command, in a subprocess
ZERO = re.compile(r"0(?:\.0*)?\s*")  # sleep(0): a yield to the loop, not a wait
MARKER = re.compile(r"#\s*sleep:\s*\S")


def bare_sleeps(root: Path = TESTS) -> list[str]:
    """Every unexplained non-zero sleep under ``root`` as ``path:line: text``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "node_modules" in path.parts or path == Path(__file__).resolve():
            continue
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            code = line.split("#", 1)[0]
            for m in SLEEP.finditer(code):
                if ZERO.fullmatch(m["arg"] if m["cmd"] is None else m["cmd"]):
                    continue
                if MARKER.search(line) or (n > 0 and lines[n - 1].lstrip().startswith("#")
                                           and MARKER.search(lines[n - 1])):
                    continue
                found.append(f"{path.relative_to(root.parent)}:{n + 1}: {line.strip()}")
    return found


def test_the_scan_sees_a_bare_sleep_and_honours_the_marker(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "await asyncio.sleep(0.1)\n"
        "time.sleep(DELAY)\n"
        "await asyncio.sleep(0)\n"
        "subprocess.run([\"sleep\", \"0.05\"])\n"
        "await asyncio.sleep(10)  # sleep: the fake upstream never answers\n"
        "# sleep: the token must really expire\n"
        "await asyncio.sleep(TTL)\n")
    assert [f.split(":")[1] for f in bare_sleeps(tmp_path)] == ["1", "2", "4"]


def test_at_most_a_few_bare_sleeps_are_left() -> None:
    found = bare_sleeps()
    assert len(found) <= LIMIT, "sleeps that wait for something to happen (use tests/waiting.py, or mark a " \
        "scenario's sleep with '# sleep: <why>'):\n" + "\n".join(found)
