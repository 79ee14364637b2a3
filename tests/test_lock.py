"""The lock: the versions CI tests with come from ``constraints.txt``, installed the same way by ``.ci/run`` and
the README, so that a new release of a dependency cannot break a fresh machine's CI unnoticed."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
INSTALL = "pip install -c constraints.txt -e '.[test]'"


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            assert pinned, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = pinned
    return pins


def test_ci_and_readme_install_with_the_lock() -> None:
    assert INSTALL in (ROOT / ".ci" / "run").read_text()
    assert INSTALL in (ROOT / "README.md").read_text()


def test_every_direct_dependency_is_locked() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    pins = _pins()
    named = set(re.findall(r'^\s*"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?[=<>!~]', pyproject, flags=re.M))
    named.discard("mcp-legacy-gateway")
    assert named, "no dependency found in pyproject.toml"
    missing = sorted(n for n in named if canonicalize_name(n) not in pins)
    assert not missing, f"not in constraints.txt: {missing}"


def test_the_environment_is_the_locked_one() -> None:
    """Run under CI's install, every locked distribution is present at its pinned version."""
    wrong = {}
    for name, pinned in _pins().items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            wrong[name] = "absent"
            continue
        if installed != pinned:
            wrong[name] = f"{installed} (locked {pinned})"
    assert not wrong, f"installed without -c constraints.txt? {wrong}"
