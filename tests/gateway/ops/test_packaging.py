"""Packaging: the ``mcp-legacy-gateway`` console script is the CLI's ``main`` (as ``python -m gateway``), and
nothing ``serve`` imports comes from the ``test`` extra alone."""

from __future__ import annotations

import ast
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from gateway.ops import cli

ROOT = Path(__file__).resolve().parents[3]
TEST_ONLY = {"mcp", "jsonschema", "hypothesis", "pytest", "pytest_aiohttp", "pytest_asyncio"}  # the [test] extra's
PLUGIN = "gateway/ops/testing.py"  # the pytest plugin: only pytest loads it, so it may import pytest


def test_pyproject_declares_the_console_script() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["mcp-legacy-gateway"] == "gateway.ops.cli:main"


def test_the_installed_entry_point_is_the_cli_main() -> None:
    try:
        dist = metadata.distribution("mcp-legacy-gateway")
    except metadata.PackageNotFoundError:
        pytest.skip("the distribution is not installed")
    scripts = [ep for ep in dist.entry_points if ep.group == "console_scripts" and ep.name == "mcp-legacy-gateway"]
    if not scripts:
        pytest.skip("installed before the console script was declared (reinstall: pip install -e .)")
    assert scripts[0].value == "gateway.ops.cli:main"
    assert scripts[0].load() is cli.main


def imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def test_the_shipped_packages_import_nothing_from_the_test_extra() -> None:
    offenders = []
    for package in ("gateway", "adapters", "kit", "modern_server"):
        for path in (ROOT / package).rglob("*.py"):
            if path.relative_to(ROOT).as_posix() == PLUGIN:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in imported(node) if n.split(".")[0] in TEST_ONLY]
    assert not offenders



def test_pyproject_declares_the_pytest_plugin_under_its_module_name() -> None:
    plugins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert plugins == {"gateway.ops.testing": "gateway.ops.testing"}


def test_nothing_shipped_imports_the_pytest_plugin() -> None:
    users = [str(path.relative_to(ROOT)) for package in ("gateway", "adapters", "kit", "modern_server")
             for path in (ROOT / package).rglob("*.py") if path.relative_to(ROOT).as_posix() != PLUGIN
             for node in ast.walk(ast.parse(path.read_text())) if "gateway.ops.testing" in imported(node)]
    assert not users
