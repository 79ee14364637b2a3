"""Every reference to a design decision resolves: code, tests, configuration and docs cite decisions by page and
heading (``docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds``), each names a page of
docs/design/ and a heading on it, and nothing cites the old numbered page that was split into them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design"
CITE = re.compile(r"docs/design/([a-z0-9-]+\.md)#([\w-]+)")
OLD = re.compile(r"docs/design\.md|design §\d|\bdesign choices? \d")
SOURCES = ("adapters", "gateway", "modern_server", "bench", "tests", "config")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def files() -> list[Path]:
    found = [p for folder in SOURCES for p in (ROOT / folder).rglob("*") if p.is_file()
             and p.suffix in (".py", ".toml", ".cfg", ".sh", ".mjs") and "node_modules" not in p.parts]
    return [*found, ROOT / ".ci" / "run", ROOT / "pyproject.toml"]


def test_every_design_citation_names_a_page_and_a_heading() -> None:
    pages = {page.name: anchors(page) for page in DESIGN.glob("*.md")}
    dead = [f"{path.relative_to(ROOT)}: {page}#{anchor}" for path in files()
            for page, anchor in CITE.findall(path.read_text())
            if anchor not in pages.get(page, set())]
    assert dead == []


def test_nothing_cites_the_numbered_page() -> None:
    old = [f"{path.relative_to(ROOT)}:{n}" for path in files()
           for n, line in enumerate(path.read_text().splitlines(), 1) if OLD.search(line)]
    assert old == []
