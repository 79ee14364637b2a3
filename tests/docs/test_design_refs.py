"""Every reference to a design decision resolves: code, tests, configuration and docs cite decisions by page and
heading (``docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds``), each names a page of
docs/design/ and a heading on it, and nothing cites the old numbered page that was split into them. The user docs
link to the same pages and headings (``[Session stores](../design/replicas.md#session-stores)``), and carry none
of the old page's section numbers, which name nothing a reader can find now."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design"
CITE = re.compile(r"docs/design/([a-z0-9-]+\.md)#([\w-]+)")
OLD = re.compile(r"docs/design\.md|design §\d|\bdesign choices? \d")
SOURCES = ("adapters", "gateway", "modern_server", "bench", "tests", "config")
# A markdown link to a design page, relative to the document it is in, with its heading anchor if it names one.
LINK = re.compile(r"\]\(((?:[\w./-]*/)?design/[a-z0-9-]+\.md)(?:#([^)\s]*))?\)")
# "§4.4" is a section only after an RFC's number ("RFC 6749 §4.4", "RFC 9728 §3, §5"); the specification's own
# sections are cited by title ("2025-11-25 basic/transports §Streamable HTTP") and never match.
SECTION = re.compile(r"§\s*\d")
RFC_BEFORE = re.compile(r"RFC \d+ (?:§[\w.]+(?:, | and |\u2013))*$")


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


def user_docs() -> list[Path]:
    docs = ROOT / "docs"
    return [*docs.glob("*.md"), *(p for folder in ("howto", "topics", "reference")
                                   for p in (docs / folder).rglob("*.md")), ROOT / "README.md"]


def test_user_docs_link_design_pages_and_headings_that_exist() -> None:
    pages = {page.resolve(): anchors(page) for page in DESIGN.glob("*.md")}
    links = [(path, target, anchor) for path in user_docs()
             for target, anchor in LINK.findall(path.read_text())]
    assert len(links) > 20  # the docs do link to the decisions: a pattern that found none would prove nothing
    dead = [f"{path.relative_to(ROOT)}: {target}#{anchor}" for path, target, anchor in links
            if (page := (path.parent / target).resolve()) not in pages or (anchor and anchor not in pages[page])]
    assert dead == []


def test_user_docs_carry_no_decision_numbers() -> None:
    numbered = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in user_docs()
                for n, line in enumerate(path.read_text().splitlines(), 1)
                if OLD.search(line) or any(not RFC_BEFORE.search(line[:hit.start()])
                                           for hit in SECTION.finditer(line))]
    assert numbered == []
