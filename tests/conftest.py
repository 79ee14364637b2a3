"""Suite-wide guard: tests never write into the checkout.

``serve`` and ``report`` use ``./gateway-usage.sqlite3`` by default, so a test (or a process it starts) that
forgets a temporary path writes fake traffic into the user's own migration history. The checkout's untracked
and ignored files are listed before and after the run; anything new (bytecode caches aside) fails the run and
names the file.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import schema

ROOT = Path(__file__).resolve().parent.parent


def _written() -> set[str] | None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return None
    entries = {line[3:] for line in out.stdout.splitlines() if line[:2] in ("??", "!!")}
    return {e for e in entries if "__pycache__" not in e and not e.endswith(".pyc")}


@pytest.fixture(scope="session", autouse=True)
def nothing_written_into_the_checkout() -> Iterator[None]:
    before = _written()
    yield
    after = _written()
    if before is not None and after is not None and after - before:
        pytest.fail(f"the tests wrote into the checkout: {sorted(after - before)}", pytrace=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(f"wire messages validated with {schema.MODE}")
