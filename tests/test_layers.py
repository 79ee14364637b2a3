"""The architecture, read from the folders: every import (top-level or inside a function) points down.

Floors, bottom first: ``adapters`` (the pure protocol core) < ``kit`` (the pure tooling) < ``gateway.errors`` (the
shell's exception tree) < ``gateway.config`` <
``gateway.auth`` < ``gateway.upstream`` < ``gateway.session`` < ``gateway.telemetry`` < ``gateway.http`` <
``gateway.ops``. A module may import its own folder and the floors below it, never one above; and no set of
modules imports itself round in a circle (in the gateway, the adapters, the kit and the reference core), since a
circle held apart by imports inside functions is still a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("adapters", "kit", "gateway.errors", "gateway.config", "gateway.auth", "gateway.upstream", "gateway.session",
          "gateway.telemetry", "gateway.http", "gateway.ops")
PACKAGES = ("adapters", "kit", "gateway", "modern_server")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (``from pkg import mod`` counts as ``pkg.mod`` when that exists)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in known}


def graph() -> dict[str, set[str]]:
    paths = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    known = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, known) - {module_name(p)} for p in paths}


def floor(module: str) -> int | None:
    matches = [i for i, name in enumerate(FLOORS) if module == name or module.startswith(name + ".")]
    return matches[-1] if matches else None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_there_is_a_graph_to_check() -> None:
    edges = graph()
    assert "gateway.http.app" in edges and "gateway.session.runtime" in edges["gateway.http.app"]
    assert "kit.check" in edges["kit.scenario"]  # the kit is walked too


def test_no_module_imports_a_floor_above_its_own() -> None:
    upward = [f"{source} -> {target}" for source, targets in graph().items() for target in targets
              if floor(source) is not None and floor(target) is not None and floor(target) > floor(source)]
    assert not upward, upward


def test_every_gateway_module_is_on_a_floor() -> None:
    loose = [m for m in graph() if m.startswith("gateway.") and floor(m) is None and m != "gateway.__main__"]
    assert not loose, f"modules outside the floors {FLOORS}: {loose}"


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])
def test_the_cycle_finder_finds_cycles(edges: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(edges) == expected


# HTTP answers are written on the http floor: the session floor keeps streams and sessions as data (its modules may
# name aiohttp's types, never make or subclass a response).
RESPONSES = {"Response", "StreamResponse", "FileResponse", "json_response", "EventStreamResponse"}


def responses_made(path: Path) -> set[str]:
    made: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets = [node.func] if isinstance(node, ast.Call) else node.bases if isinstance(node, ast.ClassDef) else []
        made.update(t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", "") for t in targets)
    return made & RESPONSES


@pytest.mark.parametrize("path", sorted((ROOT / "gateway" / "session").glob("*.py")), ids=lambda p: p.name)
def test_the_session_floor_writes_no_http_answer(path: Path) -> None:
    assert not responses_made(path), f"{path.name} makes {sorted(responses_made(path))}"


def test_the_answer_check_sees_an_answer() -> None:
    assert responses_made(ROOT / "gateway" / "http" / "streams.py") >= {"Response", "StreamResponse"}
