"""House rules enforced by inspection: adapters/ (the protocol core) and kit/ (the tooling) stay sans-IO, and the
core knows nothing of the tooling; modern_server/ knows nothing of the gateway."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN_IN_ADAPTERS = {"aiohttp", "asyncio", "socket", "time", "random", "secrets", "os", "websockets",
                         "gateway", "modern_server", "threading", "subprocess", "datetime", "uuid", "httpx"}
# The core decides the protocol alone: the tooling builds on it, never the other way round.
FORBIDDEN_IN_CORE = FORBIDDEN_IN_ADAPTERS | {"kit"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            roots.add("<dynamic __import__>")
    return roots


ADAPTER_MODULES = sorted((ROOT / "adapters").glob("*.py"))
KIT_MODULES = sorted((ROOT / "kit").glob("*.py"))
PURE_MODULES = ADAPTER_MODULES + KIT_MODULES


def pure_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_there_are_adapter_and_kit_modules_to_check() -> None:
    assert len(ADAPTER_MODULES) >= 10
    assert len(KIT_MODULES) >= 5


@pytest.mark.parametrize("path", ADAPTER_MODULES, ids=pure_id)
def test_adapters_import_nothing_that_does_io_nor_the_kit(path: Path) -> None:
    bad = imported_roots(path) & (FORBIDDEN_IN_CORE | {"<dynamic __import__>"})
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", KIT_MODULES, ids=pure_id)
def test_the_kit_imports_nothing_that_does_io(path: Path) -> None:
    bad = imported_roots(path) & (FORBIDDEN_IN_ADAPTERS | {"<dynamic __import__>"})
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_import_checker_catches_forbidden_imports(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import asyncio\nfrom time import monotonic\nimport os.path\nfrom gateway.http.app import x\n")
    assert {"asyncio", "time", "os", "gateway"} <= imported_roots(sample)


@pytest.mark.parametrize("path", sorted((ROOT / "modern_server").rglob("*.py")), ids=lambda p: p.name)
def test_modern_server_imports_neither_gateway_nor_adapters(path: Path) -> None:
    assert not imported_roots(path) & {"gateway", "adapters", "kit"}, path


@pytest.mark.parametrize("path", PURE_MODULES, ids=pure_id)
def test_pure_functions_stay_small(path: Path) -> None:
    tree = ast.parse(path.read_text())
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines)" for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 45]
    assert not long, long


# The decisions about one message on a legacy session are made in adapters.session alone
# (docs/design/core-and-shell.md#one-session-core-decides-the-shell-performs): the shell may not call them itself, or
# the order of the checks would live in two places.
SESSION_DECISIONS = {"decide", "route_request", "route_notification", "cancel_request", "admit", "admit_initialize",
                     "admit_modern", "sunset_passed", "legacy_answer_version", "initialize_size_error"}


def decision_calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names & SESSION_DECISIONS


@pytest.mark.parametrize("path", sorted((ROOT / "gateway" / "http").glob("*.py")), ids=lambda p: p.name)
def test_the_endpoint_leaves_session_decisions_to_the_core(path: Path) -> None:
    assert not decision_calls(path), f"{path.name} decides {sorted(decision_calls(path))} itself"


def test_the_decision_check_can_see_a_decision() -> None:
    assert decision_calls(ROOT / "adapters" / "session.py") >= {"decide", "admit", "admit_modern", "sunset_passed"}
